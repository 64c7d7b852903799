#include "writable_place.hpp"

#include <fmt/format.h>

namespace pyjail {

bool fs_path_within(const std::string& inner, const std::string& outer) {
    if (outer.empty() || inner.empty()) return false;
    if (outer == "/") return true;
    return inner == outer || (inner.size() > outer.size() && inner.compare(0, outer.size(), outer) == 0 &&
                              inner[outer.size()] == '/');
}

namespace {

// Whether the directory `d` lies inside the directory `place` on the host: `place` is `d`
// or one of its ancestors, or (when the way up crossed a bind mount of part of a filesystem)
// the mount's root lies inside `place` within their common filesystem -- the same directory
// reached under another name.
bool lies_inside(const LookupDir& d, const WritablePlace& place) {
    for (const FileId& a : d.ancestors)
        if (a == place.id) return true;
    if (place.fs_path.empty()) return false;
    for (const MountRoot& m : d.mounts)
        if (m.dev == place.id.dev && fs_path_within(m.fs_path, place.fs_path)) return true;
    return false;
}

}  // namespace

std::string jail_writable_reason(const OutputPath& out, const std::vector<WritablePlace>& places,
                                 bool replaced) {
    bool any_writable = false;
    for (const WritablePlace& p : places) {
        if (!p.is_dir) {
            // A writable bind of the file itself: the jail holds it open for writing.
            if (!replaced && out.file && *out.file == p.id)
                return fmt::format("it is the source of {} {}, which the jail can write", p.origin, p.source);
            any_writable = true;
            continue;
        }
        any_writable = true;
        for (std::size_t i = 0; i < out.lookups.size(); ++i) {
            const LookupDir& d = out.lookups[i];
            if (!lies_inside(d, p)) continue;
            if (i + 1 == out.lookups.size())
                return fmt::format("its directory {} lies inside {} {}, which the jail can write", d.path,
                                   p.origin, p.source);
            return fmt::format("the way to it goes through {}, which lies inside {} {}, which the jail "
                               "can write",
                               d.path, p.origin, p.source);
        }
    }
    // Another name of the same file could be anywhere, in a place the jail writes among them.
    if (!replaced && any_writable && out.file && out.links > 1)
        return fmt::format("it has {} hard links, and another could lie where the jail can write",
                           out.links);
    return "";
}

}  // namespace pyjail
