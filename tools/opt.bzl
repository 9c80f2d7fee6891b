"""opt_files: files built with -c opt (and -g, for the separate debug info the
install layout keeps), whatever compilation mode the build was started with, so
that `bazel run //tools:install` installs the optimized library by default."""

def _opt_impl(settings, _attr):
    copts = settings["//command_line_option:copt"]
    return {
        "//command_line_option:compilation_mode": "opt",
        "//command_line_option:copt": copts if "-g" in copts else copts + ["-g"],
    }

_opt_transition = transition(
    implementation = _opt_impl,
    inputs = ["//command_line_option:copt"],
    outputs = [
        "//command_line_option:compilation_mode",
        "//command_line_option:copt",
    ],
)

def _opt_files_impl(ctx):
    files = depset(transitive = [src[DefaultInfo].files for src in ctx.attr.srcs])
    return [DefaultInfo(files = files, runfiles = ctx.runfiles(transitive_files = files))]

opt_files = rule(
    implementation = _opt_files_impl,
    attrs = {
        "srcs": attr.label_list(cfg = _opt_transition, allow_files = True),
        "_allowlist_function_transition": attr.label(
            default = "@bazel_tools//tools/allowlists/function_transition_allowlist",
        ),
    },
)
