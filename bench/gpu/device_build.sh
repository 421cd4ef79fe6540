#!/bin/sh
# Builds autopar-profile on a lent GPU machine whose image has the CUDA
# toolkit and CMake but neither cJSON nor GLPK, and nothing can be fetched
# there. Debian's packages, downloaded beforehand into DEBDIR, are unpacked
# into / where their files are missing (they add headers and shared
# libraries under /usr and replace nothing). NCCL may sit outside the CUDA
# toolkit (PyTorch's wheel ships it as libnccl.so.2 with no libnccl.so), so
# it is looked for and linked through NCCL_HOME (/tmp/ap-nccl, whose
# libnccl.so.2 the build's RPATH then finds at run time).
#
#   mkdir -p .debs && (cd .debs && apt-get download libcjson1 libcjson-dev \
#       libglpk40 libglpk-dev pkgconf pkgconf-bin libpkgconf3)   # here
#   sh bench/gpu/device_build.sh .debs build                      # there
#
# Prints where NCCL was found and builds only the autopar-profile target;
# exits non-zero when the profiler is not built.
set -u
debs=${1:-.debs} build=${2:-build}

have_pc=0 have_cjson=0 have_glpk=0
command -v pkg-config >/dev/null 2>&1 && have_pc=1
[ -e /usr/include/cjson/cJSON.h ] && have_cjson=1
[ -e /usr/include/glpk.h ] && have_glpk=1
for f in "$debs"/*.deb; do
    [ -e "$f" ] || continue
    pkg=$(basename "$f" | cut -d_ -f1)
    case $pkg in
        pkgconf|pkgconf-bin|libpkgconf3) [ $have_pc = 1 ] && continue ;;
        libcjson*) [ $have_cjson = 1 ] && continue ;;
        libglpk*) [ $have_glpk = 1 ] && continue ;;
    esac
    echo "unpacking $pkg"
    dpkg -x "$f" / || exit 1
done
ldconfig 2>/dev/null

if [ -z "${NCCL_HOME:-}" ]; then
    hdr=$(find /usr/local/cuda/include /usr/include /opt /usr/local/lib \
        -name nccl.h 2>/dev/null | head -1)
    if [ -n "$hdr" ]; then
        inc=$(dirname "$hdr")
        lib=
        for d in "$(dirname "$inc")/lib" "$(dirname "$inc")/lib64" /usr/local/cuda/lib64 \
                 /usr/local/cuda/lib /usr/lib/x86_64-linux-gnu; do
            for n in libnccl.so.2 libnccl.so; do
                [ -z "$lib" ] && [ -e "$d/$n" ] && lib=$d/$n
            done
        done
        NCCL_HOME=/tmp/ap-nccl
        mkdir -p $NCCL_HOME/include $NCCL_HOME/lib
        ln -sf "$hdr" $NCCL_HOME/include/nccl.h
        if [ -n "$lib" ]; then
            ln -sf "$lib" $NCCL_HOME/lib/libnccl.so
            ln -sf "$lib" $NCCL_HOME/lib/libnccl.so.2
        fi
        export NCCL_HOME
        echo "NCCL: $hdr, $lib"
    fi
fi

cmake -S . -B "$build" -DCMAKE_BUILD_TYPE=Release >"$build.cmake.log" 2>&1 || {
    cat "$build.cmake.log"; exit 1; }
grep "autopar profile:" "$build.cmake.log"
cmake --build "$build" -j"$(nproc)" --target autopar-profile >"$build.make.log" 2>&1 || {
    tail -40 "$build.make.log"; exit 1; }
ls -l "$build/autopar-profile"
