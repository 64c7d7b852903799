// `pyjail rootfs build|rebuild|info|list`: the rootfs builder as a product command. The builder is a
// Python script installed with pyjail (a build tool that runs on the host, never in a jail);
// this finds it as pyjail finds its other data, resolves rootfs names the way --rootfs does,
// and execs it with the host's python3.
#pragma once

#include <string>
#include <vector>

namespace pyjail {

// args[0] is "rootfs". Returns only for --help; otherwise execs the builder, or throws
// JailError (exit 125).
int run_rootfs_command(const std::vector<std::string>& args);

struct DataDirs;

// The command line that runs the builder with `args` (the interpreter first). Throws JailError
// when there is no builder, or others could change it. `pyjail doctor` runs it too.
std::vector<std::string> rootfs_builder_argv(const DataDirs& dirs,
                                             const std::vector<std::string>& args);

}  // namespace pyjail
