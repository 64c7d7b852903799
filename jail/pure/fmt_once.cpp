// fmt's compiled part, built once for the static binary. Debian's libfmt-dev ships only a
// shared library, and the header-only mode compiles all of fmt's formatting code into every
// translation unit that includes it (it doubled the compile time of most of pyjail's files).
// Here the non-template functions of format-inl.h are defined once, with the few templates
// format.h declares `extern` instantiated for char.
#include <fmt/format-inl.h>

FMT_BEGIN_NAMESPACE
namespace detail {
template FMT_API auto thousands_sep_impl(locale_ref) -> thousands_sep_result<char>;
template FMT_API auto decimal_point_impl(locale_ref) -> char;
}  // namespace detail
FMT_END_NAMESPACE
