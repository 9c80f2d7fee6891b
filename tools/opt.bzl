"""opt_files: files built with -c opt (and -g, for the separate debug info the
install layout keeps) and link-time optimization, whatever compilation mode the
build was started with, so that `bazel run //tools:install` installs the
optimized library by default.

Link-time optimization inlines across the library's files (an engine pass runs
through about fifty functions in a dozen of them) and, with the version script
hiding everything but the API, calls them directly. A file that sets symbol
versions with top-level `.symver` directives opts out (`-fno-lto` in its own
copts): the LTO partitions would not keep the aliases those name."""

_LTO = "-flto=auto"

def _with(opts, extra):
    return opts + [o for o in extra if o not in opts]

def _opt_impl(settings, _attr):
    return {
        "//command_line_option:compilation_mode": "opt",
        "//command_line_option:copt": _with(settings["//command_line_option:copt"], ["-g", _LTO]),
        "//command_line_option:linkopt": _with(settings["//command_line_option:linkopt"], [_LTO]),
    }

_opt_transition = transition(
    implementation = _opt_impl,
    inputs = [
        "//command_line_option:copt",
        "//command_line_option:linkopt",
    ],
    outputs = [
        "//command_line_option:compilation_mode",
        "//command_line_option:copt",
        "//command_line_option:linkopt",
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
