"""A small cuda_library: compiles .cu files with nvcc (sm_90) and wraps the objects in a cc_library.

nvcc comes from --define=CUDA_PATH=... (set in .bazelrc); the host compiler is g++ from PATH.
"""

def cuda_library(name, srcs, hdrs = [], hdr_srcs = [], deps = [], includes = [], arch = "sm_90", copts = [], **kwargs):
    """nvcc-compiles each source and links the result like a static cc_library.

    Args:
      name: target name.
      srcs: .cu sources.
      hdrs: headers the sources include (also exported).
      hdr_srcs: header files or filegroups from other packages that nvcc reads (not exported).
      deps: cc_library deps linked into the result.
      includes: extra include directories, relative to the workspace root.
      arch: the GPU architecture passed to -arch.
      copts: extra nvcc flags.
      **kwargs: passed to the cc_library (tags, visibility, testonly...).
    """
    objs = []
    inc = " ".join(["-I" + d + " -I$(GENDIR)/" + d for d in includes])
    for src in srcs:
        obj = name + "_" + src.replace("/", "_").replace(".cu", ".o")
        native.genrule(
            name = obj + "_nvcc",
            srcs = [src] + hdrs + hdr_srcs,
            outs = [obj],
            cmd = ("$(CUDA_PATH)/bin/nvcc -c -std=c++17 -O2 -arch=%s -Xcompiler -fPIC " % arch) +
                  "-Werror all-warnings " + " ".join(copts) + " -I. -I$(GENDIR) " + inc +
                  " -o $@ $(location %s)" % src,
            message = "nvcc " + src,
            tags = kwargs.get("tags", []),
            testonly = kwargs.get("testonly", False),
        )
        objs.append(":" + obj)
    native.cc_library(
        name = name,
        srcs = objs,
        hdrs = hdrs,
        deps = deps + ["@local_cuda//:cudart_static"],
        linkstatic = True,
        **kwargs
    )
