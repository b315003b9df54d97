#!/usr/bin/env bash
# Packs drtrain and its Open MPI runtime into one relocatable tarball for a GPU host that has
# CUDA/cuDNN/NCCL and Python but no MPI, HDF5, Boost, compiler or network
# (Option A of ../shared/GPU_HOST_RECIPE.md).
#
#   scripts/make_gpu_bundle.sh [BUILD_DIR] [--out FILE] [--xz | --gz] [--rebuild-libevent]
#                              [--verify] [--keep DIR]
#
#   BUILD_DIR           CMake build folder (default: <repo>/build); binaries from BUILD_DIR/bin
#                       and BUILD_DIR/tests
#   --out FILE          the tarball (default: <repo>/.gpu/drtrain-gpu.tar.xz, or .tar.gz with --gz;
#                       /.gpu/ is git-ignored). The other flavour is removed, so one tarball remains.
#   --xz | --gz         compression (default xz: ~50 MiB, about a minute on 2 cores; gz is ~65 MiB,
#                       over the device tool's 64 MiB). bench/gpu/run.sh accepts either.
#   --rebuild-libevent  rebuild Debian 12's libevent without arc4random (apt-get source into a
#                       private apt state: network, gcc, make, dpkg-dev; /etc/apt untouched; ~1 min)
#                       so that the bundle runs on glibc 2.34/2.35 hosts (Ubuntu 22.04). Without
#                       it the bundle needs glibc >= 2.36 (Debian 12's libevent uses arc4random).
#   --verify            after packing, unpack the tarball and run it with the system Open MPI,
#                       PMIx, hwloc, libevent and every bundled library covered by empty files in a
#                       private mount namespace (root only): ldd checks, then
#                       mpirun -np 3 drtrain --dataset synthetic --max-steps 20, then LD_DEBUG
#                       shows which libraries came from the system.
#   --verify-only       verify the existing tarball (--out) without making a new one
#   --keep DIR          also leave the unpacked staging folder in DIR/drtrain-gpu
#
# Layout of the tarball (top folder drtrain-gpu/):
#   bin/      drtrain, drtrain-ckpt, drtrain-data, drt_bench_kernels, drt_bench_layers (those built),
#             orterun (mpirun, mpiexec: links to it), orted, ompi_info, pmix_info
#   tests/    drt_gpu_tests (if built)
#   lib/      every non-glibc, non-CUDA shared library the above and the plugins need
#   lib/openmpi3/  Open MPI plugins minus UCX/libfabric/verbs/PSM/OpenSHMEM ones
#   lib/pmix/      PMIx plugins;  lib/hwloc/: empty on purpose;  lib/cxx/: libstdc++/libgcc_s fallback
#   share/openmpi, share/pmix, etc/   help texts and Debian's openmpi-mca-params.conf
#   data/fashion-mnist/  the Fashion-MNIST IDX files, uncompressed (xz packs them 4 MiB smaller
#             than their .gz; bench/gpu/run.sh gzips them back on the host, since drtrain and the
#             torch peer read the .gz names);  peers/torch_train.py
#   env.sh    `source env.sh`: PATH, LD_LIBRARY_PATH (bundle first, host CUDA libraries last),
#             OPAL_*/PMIX_* and HWLOC_PLUGINS_PATH, all relative to its own folder
#   BUNDLE_INFO.json  what is inside, glibc/GLIBCXX floors, CUDA sonames expected from the host
set -euo pipefail

ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
BUILD=$ROOT/build
OUT=""
COMPRESS=xz
REBUILD_LIBEVENT=0
VERIFY=0
VERIFY_ONLY=0
KEEP=""
DATA_SRC=${DRT_DATA_SRC:-/usr/share/datasets/fashion-mnist}
MULTIARCH=x86_64-linux-gnu
OMPI_LIB=/usr/lib/$MULTIARCH/openmpi/lib
OMPI_PLUGINS=$OMPI_LIB/openmpi3
PMIX_ROOT=/usr/lib/$MULTIARCH/pmix2

usage() { sed -n '2,/^set -euo/p' "$0" | sed '$d' | sed 's/^# \{0,1\}//'; }
while [[ $# -gt 0 ]]; do
  case "$1" in
    --out) OUT=$2; shift 2 ;;
    --out=*) OUT=${1#*=}; shift ;;
    --xz) COMPRESS=xz; shift ;;
    --gz) COMPRESS=gz; shift ;;
    --rebuild-libevent) REBUILD_LIBEVENT=1; shift ;;
    --verify) VERIFY=1; shift ;;
    --verify-only) VERIFY_ONLY=1; shift ;;
    --keep) KEEP=$2; shift 2 ;;
    -h|--help) usage; exit 0 ;;
    -*) echo "make_gpu_bundle.sh: unknown option '$1' (see --help)" >&2; exit 2 ;;
    *) BUILD=$1; shift ;;
  esac
done
BUILD=$(cd "$BUILD" && pwd) || { echo "make_gpu_bundle.sh: no build folder $BUILD" >&2; exit 1; }
[[ -n $OUT ]] || OUT=$ROOT/.gpu/drtrain-gpu.tar.$COMPRESS

say() { echo "make_gpu_bundle: $*"; }
warn() { echo "make_gpu_bundle: WARNING: $*" >&2; }
die() { echo "make_gpu_bundle: ERROR: $*" >&2; exit 1; }

for tool in ldd objdump readelf tar; do
  command -v "$tool" >/dev/null || die "$tool not found (apt-get install binutils)"
done
[[ -d $OMPI_PLUGINS ]] || die "$OMPI_PLUGINS not found: Debian's Open MPI (openmpi-bin) must be installed"

TMP=$(mktemp -d /tmp/drt_gpu_bundle.XXXXXX)
trap 'rm -rf "$TMP"' EXIT
B=$TMP/drtrain-gpu
mkdir -p "$B"/{bin,tests,lib/openmpi3,lib/pmix,lib/hwloc,lib/cxx,share,etc,data/fashion-mnist,peers}

# --verify / --verify-only: the bundle alone, with the system MPI stack and every bundled soname
# covered by empty files (GPU_HOST_RECIPE.md, "How to verify on the build machine").
verify_bundle() {
  [[ $(id -u) == 0 ]] && command -v unshare >/dev/null || die "verifying needs root and unshare"
  [[ -f $OUT ]] || die "no tarball $OUT to verify"
  local v=$TMP/verify f
  mkdir -p "$v"
  tar -C "$v" -xf "$OUT"
  for f in "$v"/drtrain-gpu/data/fashion-mnist/*-ubyte; do [[ -f $f ]] && gzip -1 "$f"; done
  cat > "$v/inner.sh" <<'EOF'
set -uo pipefail
V=$1 B=$1/drtrain-gpu
empty_dir=$(mktemp -d) empty_file=$(mktemp)
covered=0
declare -A seen=()
# CUDA: the host's, never bundled. Make the libraries the programs link reachable only under
# another folder (CUDA_HOME=$V/altcuda) and cover them where they are, as the recipe's CUDA test
# did: env.sh must find them there, and the build-time paths (RUNPATH too) must not matter.
mkdir -p "$V/altcuda/lib"
ncuda=0
while read -r soname path; do
  real=$(readlink -f "$path")
  [[ -e $V/altcuda/lib/$soname ]] && continue
  touch "$V/altcuda/lib/$soname"
  mount --bind "$real" "$V/altcuda/lib/$soname" || continue
  # Cover it, and every other copy the loader cache knows (here /usr/local/lib has a cudart too).
  for other in "$real" $(ldconfig -p | awk -v so="$soname" '$1 == so {print $NF}'); do
    other=$(readlink -f "$other")
    [[ -n ${seen[$other]:-} ]] || { seen[$other]=1; mount --bind "$empty_file" "$other"; }
  done
  ncuda=$((ncuda + 1))
done < <(for f in "$B"/bin/* "$B"/tests/*; do [[ -f $f ]] && ldd "$f" 2>/dev/null; done |
         awk '$2 == "=>" && $1 ~ /^lib(cuda|cudart|cublas|cublasLt|cudnn|nccl|nvrtc|nvJitLink)[.]so/ {print $1, $3}' | sort -u)
echo "verify: $ncuda CUDA libraries reachable only under CUDA_HOME=$V/altcuda (originals covered)"
for d in /usr/lib/x86_64-linux-gnu/{openmpi,pmix2,hwloc,openblas-pthread,hdf5} /etc/openmpi /usr/share/openmpi; do
  [[ -e $d ]] && mount --bind "$empty_dir" "$d" && covered=$((covered + 1))
done
# Strict: every soname the bundle carries (lib/ and lib/cxx/), and the system launchers.
for so in "$B"/lib/*.so* "$B"/lib/cxx/*.so* /usr/bin/orterun /usr/bin/orted; do
  name=$(basename "$so")
  for cand in /usr/bin/$name /lib/x86_64-linux-gnu/$name /usr/lib/x86_64-linux-gnu/$name \
              /usr/lib/x86_64-linux-gnu/openblas-pthread/$name /usr/lib/x86_64-linux-gnu/hdf5/openmpi/$name; do
    [[ -e $cand ]] || continue
    real=$(readlink -f "$cand")
    [[ -n ${seen[$real]:-} ]] && continue
    seen[$real]=1
    mount --bind "$empty_file" "$real" && covered=$((covered + 1))
  done
done
echo "verify: covered $covered system paths with empty files/folders"
export CUDA_HOME=$V/altcuda
source "$B/env.sh"
echo "verify: DRT_CUDA_LIB_DIRS=$DRT_CUDA_LIB_DIRS"
echo "verify: DRT_BUNDLE_CXX=$DRT_BUNDLE_CXX (system libstdc++ is covered, so 'bundled' is expected)"
rc=0
for f in "$B"/bin/* "$B"/tests/* "$B"/lib/openmpi3/*.so "$B"/lib/pmix/*.so; do
  [[ -f $f ]] && head -c4 "$f" | grep -q ELF || continue
  bad=$(ldd "$f" 2>&1 | grep -E 'not found|file too short' || true)
  [[ -z $bad ]] || { echo "verify: ldd ${f#"$B"/}: $bad"; rc=1; }
done
echo "verify: ldd of programs and plugins: $([[ $rc == 0 ]] && echo clean || echo PROBLEMS)"
ompi_info --path all 2>&1 | grep -E 'Prefix|Pkglibdir|Sysconfdir' | sed 's/^/verify:   /'
dev=()
drtrain --help 2>/dev/null | grep -- '--device' >/dev/null && dev=(--device cpu)
mkdir -p "$V/ld"
set -x
LD_DEBUG=libs LD_DEBUG_OUTPUT=$V/ld/trace timeout 180 mpirun --oversubscribe -np 3 drtrain --num-ps 1 "${dev[@]}" \
  --dataset synthetic --max-steps 20 --batch-size 64 --eval false --metrics "$V/metrics.jsonl" < /dev/null
mrc=$?
set +x
echo "verify: mpirun exit status $mrc"
[[ $mrc == 0 ]] || rc=1
grep -q '"summary":true' "$V/metrics.jsonl" 2>/dev/null && echo "verify: summary line present" || { echo "verify: no summary line"; rc=1; }
echo "verify: libraries initialised from outside the bundle (expect glibc, and CUDA from $V/altcuda):"
grep -h 'calling init:' "$V"/ld/trace.* 2>/dev/null | sed 's/.*calling init: //' | grep -v "^$B/" | sort | uniq -c | sed 's/^/verify:   /'
outside=$(grep -h 'calling init:' "$V"/ld/trace.* 2>/dev/null | sed 's/.*calling init: //' | grep -v "^$B/" |
          grep -v "^$V/altcuda/" | grep -vE '/(libc|libm|libresolv|libpthread|libdl|librt|ld-linux-x86-64)\.so' | sort -u)
[[ -z $outside ]] || { echo "verify: non-glibc libraries from the system: $outside"; rc=1; }
exit $rc
EOF
  say "verify $OUT: private mount namespace, system Open MPI/PMIx/hwloc/libevent/HDF5/OpenBLAS and every bundled soname covered"
  if unshare -m --propagation private bash "$v/inner.sh" "$v" < /dev/null; then
    say "verify: PASSED"
  else
    die "verify: FAILED (see above)"
  fi
}

if [[ $VERIFY_ONLY == 1 ]]; then verify_bundle; exit 0; fi

# ---------------------------------------------------------------------------------------------
# 1. Programs. drtrain is required; the others are copied when built, with a warning otherwise.
PRESENT=() MISSING=()
find_built() {  # name -> path of the built executable, or nothing
  local name=$1 d
  for d in "$BUILD/bin" "$BUILD/tests" "$BUILD/bench" "$BUILD"; do
    [[ -f $d/$name && -x $d/$name ]] && { echo "$d/$name"; return; }
  done
  find "$BUILD" -maxdepth 3 -type f -name "$name" -perm -u+x 2>/dev/null | head -1
}
copy_program() {  # name dest-subfolder required(0/1)
  local name=$1 dest=$2 required=$3 path
  path=$(find_built "$name")
  if [[ -z $path ]]; then
    [[ $required == 1 ]] && die "$name not found under $BUILD (build it first)"
    warn "$name not found under $BUILD: left out of the bundle"
    MISSING+=("$dest/$name")
    return
  fi
  cp -L "$path" "$B/$dest/$name"
  PRESENT+=("$dest/$name")
  say "  $dest/$name  <- $path"
}
say "programs from $BUILD:"
copy_program drtrain bin 1
copy_program drtrain-ckpt bin 0
copy_program drtrain-data bin 0
copy_program drt_bench_kernels bin 0
copy_program drt_bench_layers bin 0
copy_program drt_gpu_tests tests 0

# Open MPI's launcher: mpirun/mpiexec are Debian alternatives pointing at orterun.
ORTERUN=$(readlink -f "$(command -v orterun || command -v mpirun)")
[[ $(basename "$ORTERUN") == orterun ]] || die "mpirun resolves to $ORTERUN, not Open MPI's orterun"
cp -L "$ORTERUN" "$B/bin/orterun"
ln -s orterun "$B/bin/mpirun"
ln -s orterun "$B/bin/mpiexec"
for tool in orted ompi_info pmix_info; do
  p=$(command -v "$tool" || true)
  [[ -n $p ]] && cp -L "$p" "$B/bin/$tool" || { [[ $tool == pmix_info ]] || die "$tool not found"; }
done

# ---------------------------------------------------------------------------------------------
# 2. Plugins: Open MPI's minus those for multi-node fabrics (their libraries are not bundled and
# they would print "unable to open mca_..."), and PMIx's.
SKIPPED_PLUGINS=()
for p in "$OMPI_PLUGINS"/*.so; do
  # (grep without -q throughout: with pipefail, -q quitting early fails the pipeline by SIGPIPE)
  if ldd "$p" 2>/dev/null | grep -E 'libuc[pst]|libfabric|libibverbs|librdmacm|libpsm|liboshmem' >/dev/null; then
    SKIPPED_PLUGINS+=("$(basename "$p")")
  else
    cp -L "$p" "$B/lib/openmpi3/"
  fi
done
cp -L "$PMIX_ROOT"/lib/pmix/*.so "$B/lib/pmix/"
say "plugins: $(ls "$B/lib/openmpi3" | wc -l) Open MPI (left out ${#SKIPPED_PLUGINS[@]}: ${SKIPPED_PLUGINS[*]}), $(ls "$B/lib/pmix" | wc -l) PMIx"

# ---------------------------------------------------------------------------------------------
# 3. Libraries: every ldd dependency, by soname, except glibc (the host's) and the CUDA stack
# (the host's: it must match the driver; never bundle libcuda).
GLIBC_RE='^(libc|libm|libpthread|libdl|librt|libresolv|libutil|libanl|libmvec|libnsl|libBrokenLocale|libthread_db|libnss_[a-z]+)\.so\.[0-9]+$|^ld-linux'
CUDA_RE='^lib(cuda|cudart|cublas|cublasLt|cudnn[a-z_]*|nccl|nvrtc[a-z-]*|nvJitLink|nvjitlink|cufft[a-z]*|curand|cusolver[a-zA-Z]*|cusparse[a-zA-Z]*|cupti|nvToolsExt|nvtx[0-9a-z_]*|nvidia-[a-z-]+|nvperf_[a-z]+|cufile[a-z_]*|npp[a-z]*|nvblas|nvshmem[a-z_]*|cudadevrt)\.so'
CXX_RE='^(libstdc\+\+\.so\.6|libgcc_s\.so\.1)$'
declare -A CUDA_FROM_HOST=()
elf_files() { find "$B/bin" "$B/tests" "$B/lib/openmpi3" "$B/lib/pmix" -type f -exec sh -c 'head -c4 "$1" | grep -q ELF' _ {} \; -print; }
copy_deps() {
  local f line soname path
  while IFS= read -r f; do
    while IFS= read -r line; do
      [[ $line =~ ^[[:space:]]*([^[:space:]]+)[[:space:]]=\>[[:space:]]*(.*)\ \(0x ]] || {
        [[ $line =~ ^[[:space:]]*([^[:space:]]+)[[:space:]]=\>[[:space:]]*not\ found ]] || continue
        soname=${BASH_REMATCH[1]}
        if [[ $soname =~ $CUDA_RE ]]; then CUDA_FROM_HOST[$soname]=1; continue; fi
        die "$(basename "$f"): $soname not found on this machine"
      }
      soname=${BASH_REMATCH[1]} path=${BASH_REMATCH[2]}
      [[ $soname =~ $GLIBC_RE ]] && continue
      if [[ $soname =~ $CUDA_RE || $path == /usr/local/cuda* || $path == */site-packages/nvidia/* ]]; then
        CUDA_FROM_HOST[$soname]=1; continue
      fi
      if [[ $soname =~ $CXX_RE ]]; then
        [[ -e $B/lib/cxx/$soname ]] || cp -L "$path" "$B/lib/cxx/$soname"
        continue
      fi
      [[ -e $B/lib/$soname ]] || cp -L "$path" "$B/lib/$soname"
    done < <(ldd "$f" 2>/dev/null)
  done < <(elf_files)
}
copy_deps
# drtrain loads cuBLAS on first use (src/backend/cuda/cublas_loader.cpp), so ldd no longer lists
# it: name it here, so the bundle's check still covers it (found under CUDA_HOME on the host).
CUDA_FROM_HOST[libcublas.so.13]=1
CUDA_FROM_HOST[libcublasLt.so.13]=1
# libstdc++ and libgcc_s come from the host (GCC 11+ there); lib/cxx is the fallback env.sh uses
# when the host's libstdc++ lacks a version the bundle needs.
for so in libstdc++.so.6 libgcc_s.so.1; do
  [[ -e $B/lib/cxx/$so ]] || cp -L "/lib/$MULTIARCH/$so" "$B/lib/cxx/$so"
done
chmod -R u+w "$B"
CUDA_LIST=$( ((${#CUDA_FROM_HOST[@]})) && printf '%s\n' "${!CUDA_FROM_HOST[@]}" | sort | tr '\n' ' ' || true)
say "libraries: $(find "$B/lib" -maxdepth 1 -type f -name '*.so*' | wc -l) in lib/; from the host: glibc and the CUDA stack (${CUDA_LIST:-none linked})"

# ---------------------------------------------------------------------------------------------
# 4. Optional: libevent without arc4random (glibc 2.36) so that the bundle runs on glibc 2.34.
rebuild_libevent() {
  local src=$TMP/libevent-src apt=$TMP/apt ver
  mkdir -p "$src" "$apt/parts" "$apt/lists/partial" "$apt/cache/archives/partial"
  command -v gcc >/dev/null && command -v make >/dev/null && command -v dpkg-source >/dev/null ||
    { warn "gcc, make or dpkg-source missing (apt-get install build-essential dpkg-dev)"; return 1; }
  # A private apt state with deb-src entries made from the system's deb entries: /etc/apt and the
  # system's package lists stay untouched.
  local f
  for f in /etc/apt/sources.list.d/*.sources; do
    [[ -f $f ]] && sed 's/^Types:.*/Types: deb-src/' "$f" > "$apt/parts/$(basename "$f")"
  done
  [[ -f /etc/apt/sources.list ]] && sed -n 's/^deb /deb-src /p' /etc/apt/sources.list > "$apt/parts/main.list"
  local opts=(-o Dir::Etc::SourceList=/dev/null -o "Dir::Etc::SourceParts=$apt/parts"
              -o "Dir::State::Lists=$apt/lists" -o "Dir::Cache=$apt/cache" -qq)
  ver=$(dpkg-query -W -f='${source:Version}' libevent-core-2.1-7 2>/dev/null || true)
  say "rebuilding libevent ${ver:-?} (apt-get source, private apt state in $apt) ..."
  apt-get "${opts[@]}" update >"$TMP/libevent-apt.log" 2>&1 &&
    (cd "$src" && apt-get "${opts[@]}" source "libevent${ver:+=$ver}" >>"$TMP/libevent-apt.log" 2>&1) ||
    { warn "apt-get source libevent failed (network?):"; tail -5 "$TMP/libevent-apt.log" >&2; return 1; }
  local dir
  dir=$(find "$src" -maxdepth 1 -mindepth 1 -type d -name 'libevent-*' | head -1)
  [[ -n $dir ]] || { warn "no libevent source folder after apt-get source"; return 1; }
  # Route libevent's own arc4random copy under private names so glibc's is never referenced.
  sed -i 's|^#include "./arc4random.c"|#define arc4random ev_priv_arc4random\n#define arc4random_buf ev_priv_arc4random_buf\n#define arc4random_stir ev_priv_arc4random_stir\n#define arc4random_addrandom ev_priv_arc4random_addrandom\n#define arc4random_uniform ev_priv_arc4random_uniform\n#include "./arc4random.c"|' "$dir/evutil_rand.c"
  grep -q ev_priv_arc4random_buf "$dir/evutil_rand.c" || { warn "evutil_rand.c: include of arc4random.c not found"; return 1; }
  # Debian's patches touch Makefile.am (-no-undefined only): regenerate with autoreconf when
  # libtool is installed, else mark the shipped autotools output current so make leaves it alone.
  if command -v libtoolize >/dev/null && command -v autoreconf >/dev/null; then
    (cd "$dir" && autoreconf -fi) >"$TMP/libevent-autoreconf.log" 2>&1 ||
      { warn "autoreconf failed:"; tail -n 5 "$TMP/libevent-autoreconf.log" >&2; return 1; }
  else
    (cd "$dir" && touch aclocal.m4 && sleep 1 && touch configure config.h.in && find . -name Makefile.in -exec touch {} +)
  fi
  # The ac_cv_* settings as configure arguments, so that a config.status --recheck keeps them;
  # Debian's hardening flags as in its package (DEB_BUILD_MAINT_OPTIONS = hardening=+all).
  local cflags="-g -O2 -fstack-protector-strong -Wformat" ldflags="-Wl,-z,relro,-z,now" cppflags="-D_FORTIFY_SOURCE=2"
  if command -v dpkg-buildflags >/dev/null; then
    cflags=$(DEB_BUILD_MAINT_OPTIONS=hardening=+all dpkg-buildflags --get CFLAGS)
    ldflags=$(DEB_BUILD_MAINT_OPTIONS=hardening=+all dpkg-buildflags --get LDFLAGS)
    cppflags=$(DEB_BUILD_MAINT_OPTIONS=hardening=+all dpkg-buildflags --get CPPFLAGS)
  fi
  (cd "$dir" && ./configure -q --disable-static --disable-samples --disable-libevent-regress \
       ac_cv_func_arc4random=no ac_cv_func_arc4random_buf=no ac_cv_func_arc4random_addrandom=no \
       CFLAGS="$cflags" LDFLAGS="$ldflags" CPPFLAGS="$cppflags" >"$TMP/libevent-configure.log" 2>&1 &&
     make -j"$(nproc)" >"$TMP/libevent-make.log" 2>&1) ||
    { warn "libevent build failed:"; tail -n 20 "$TMP/libevent-configure.log" "$TMP/libevent-make.log" >&2; return 1; }
  local so built exports
  for so in libevent_core-2.1.so.7 libevent_pthreads-2.1.so.7; do
    built=$(find "$dir/.libs" -name "${so}*" -type f | head -1)
    [[ -n $built ]] || { warn "$so not built"; return 1; }
    strip --strip-unneeded "$built"
    if objdump -T "$built" | grep 'GLIBC_2\.3[5-9]' >/dev/null; then warn "$so still needs glibc > 2.34"; return 1; fi
    [[ $(readelf -d "$built" | sed -n 's/.*SONAME.*\[\(.*\)\]/\1/p') == "$so" ]] || { warn "$so: soname changed"; return 1; }
    # Same exported symbols as Debian's build.
    exports() { objdump -T "$1" | grep -v '\*UND\*' | awk '/ D[FO] /{print $NF}' | sort; }
    if ! diff <(exports "$built") <(exports "/lib/$MULTIARCH/$so") >/dev/null; then
      warn "$so: exported symbols differ from Debian's build"; return 1
    fi
    exports=$(exports "$built" | wc -l)
    [[ -e $B/lib/$so ]] && cp "$built" "$B/lib/$so"
    say "  $so rebuilt: soname and $exports exported symbols as Debian's, glibc $(objdump -T "$built" | grep -o 'GLIBC_2\.[0-9]*' | sort -uV | tail -1)"
  done
}
LIBEVENT_REBUILT=false
if [[ $REBUILD_LIBEVENT == 1 ]]; then
  rebuild_libevent && LIBEVENT_REBUILT=true || warn "--rebuild-libevent failed: keeping Debian's libevent (glibc >= 2.36 on the host)"
fi

# ---------------------------------------------------------------------------------------------
# 5. Open MPI / PMIx data and configuration (not Debian's pmix-mca-params.conf: it hardcodes the
# system plugin path).
cp -rL /usr/share/openmpi "$B/share/openmpi"
cp -rL "$PMIX_ROOT/share/pmix" "$B/share/pmix"
cp -L /etc/openmpi/* "$B/etc/"

# 6. Data and the PyTorch peer. The GPU host has no network.
n=0
for f in train-images-idx3-ubyte.gz train-labels-idx1-ubyte.gz t10k-images-idx3-ubyte.gz t10k-labels-idx1-ubyte.gz; do
  if [[ -f $DATA_SRC/$f ]]; then gzip -dc "$DATA_SRC/$f" > "$B/data/fashion-mnist/${f%.gz}"; n=$((n + 1)); fi
done
[[ $n == 4 ]] || warn "Fashion-MNIST: $n of 4 files in $DATA_SRC (apt-get install dataset-fashion-mnist?)"
cp "$ROOT/bench/peers/torch_train.py" "$B/peers/"

# ---------------------------------------------------------------------------------------------
# 7. Floors: the newest glibc symbol version any bundled ELF file needs, with and without lib/cxx,
# and the newest GLIBCXX/CXXABI the bundle needs from whichever libstdc++ it gets.
max_version() {  # pattern files... -> newest version of pattern found in the dynamic symbols
  local pat=$1; shift
  objdump -T "$@" 2>/dev/null | grep -oE "$pat" | sort -uV | tail -1
}
mapfile -t MAIN_ELF < <(find "$B/bin" "$B/tests" "$B/lib" -path "$B/lib/cxx" -prune -o -type f -print |
                         while read -r f; do head -c4 "$f" | grep -q ELF && echo "$f"; done)
GLIBC_FLOOR=$(max_version 'GLIBC_2\.[0-9]+' "${MAIN_ELF[@]}")
GLIBC_FLOOR_CXX=$(max_version 'GLIBC_2\.[0-9]+' "${MAIN_ELF[@]}" "$B"/lib/cxx/*)
GLIBCXX_NEED=$(max_version 'GLIBCXX_3\.4(\.[0-9]+)?' "${MAIN_ELF[@]}")
CXXABI_NEED=$(max_version 'CXXABI_1\.3(\.[0-9]+)?' "${MAIN_ELF[@]}")
FLOOR_FILES=$(for f in "${MAIN_ELF[@]}"; do
                objdump -T "$f" 2>/dev/null | grep "${GLIBC_FLOOR}[^.0-9]" >/dev/null && echo "${f#"$B"/}"; done | tr '\n' ' ' || true)
say "glibc floor: ${GLIBC_FLOOR#GLIBC_} (needed by $(wc -w <<<"$FLOOR_FILES") files: $(cut -d' ' -f1-6 <<<"$FLOOR_FILES")...); with lib/cxx: ${GLIBC_FLOOR_CXX#GLIBC_}"
say "libstdc++ needed: $GLIBCXX_NEED, $CXXABI_NEED (the host's if it has them, else lib/cxx)"

# ---------------------------------------------------------------------------------------------
# 8. env.sh
cat > "$B/env.sh" <<EOF
# Source with bash: sets up the drtrain GPU bundle in this folder (any path). Made by
# scripts/make_gpu_bundle.sh; see ../shared/GPU_HOST_RECIPE.md, Option A.
# Sets DRT_BUNDLE, DRT_BUNDLE_CXX (host | bundled) and DRT_CUDA_LIB_DIRS (the host CUDA library
# folders appended to LD_LIBRARY_PATH, bundle first). DRT_BUNDLE_CXX=bundled beforehand forces
# the bundled libstdc++.
_drt_glibcxx_need=$GLIBCXX_NEED
_drt_cxxabi_need=$CXXABI_NEED
EOF
cat >> "$B/env.sh" <<'EOF'
DRT_BUNDLE=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd -P)
export DRT_BUNDLE

_drt_ldconfig=$(command -v ldconfig || echo /sbin/ldconfig)

# Host CUDA library folders, found before LD_LIBRARY_PATH points at the bundle (python3 must
# not load the bundle's libraries).
_drt_cuda_dirs=()
_drt_add_cuda_dir() {
  local d=$1 x
  [[ -d $d ]] || return 0
  d=$(cd "$d" && pwd -P)
  compgen -G "$d/lib*.so*" >/dev/null || return 0
  for x in "${_drt_cuda_dirs[@]}"; do [[ $x == "$d" ]] && return 0; done
  _drt_cuda_dirs+=("$d")
}
for _d in ${CUDA_HOME:+$CUDA_HOME/lib64} ${CUDA_HOME:+$CUDA_HOME/lib} /usr/local/cuda/lib64 /usr/local/cuda/lib \
          /usr/local/cuda/targets/x86_64-linux/lib /usr/local/nvidia/lib64 /usr/local/nvidia/lib; do
  _drt_add_cuda_dir "$_d"
done
while read -r _d; do _drt_add_cuda_dir "$_d"; done < <(
  "$_drt_ldconfig" -p 2>/dev/null | grep -E 'lib(cuda|cudart|cublas|cudnn|nccl)\.so' |
    sed -n 's/.*=> \(.*\)\/[^/]*$/\1/p' | sort -u)
# pip wheels: site-packages/nvidia/*/lib of the python3 on PATH, then the usual places.
_drt_sites=$(timeout 20 python3 -c 'import site, sys
print("\n".join(site.getsitepackages() + [site.getusersitepackages()]))' 2>/dev/null || true)
for _s in $_drt_sites /opt/*/.venv/lib/python3*/site-packages /usr/local/lib/python3*/dist-packages \
          /usr/lib/python3/dist-packages "${HOME:-/root}"/.local/lib/python3*/site-packages; do
  for _d in "$_s"/nvidia/*/lib "$_s"/nvidia/*/lib64; do _drt_add_cuda_dir "$_d"; done
done

# libstdc++: the host's when it has the versions the bundle needs, else the bundled copy.
if [[ ${DRT_BUNDLE_CXX:-} != bundled ]]; then
  DRT_BUNDLE_CXX=bundled
  _drt_cxx=$("$_drt_ldconfig" -p 2>/dev/null | grep 'libstdc++\.so\.6 (libc6,x86-64)' | sed -n '1s/.*=> //p' || true)
  for _f in "$_drt_cxx" /lib/x86_64-linux-gnu/libstdc++.so.6 /usr/lib/x86_64-linux-gnu/libstdc++.so.6 /usr/lib64/libstdc++.so.6; do
    [[ -n $_f && -s $_f ]] || continue
    if grep -qa "$_drt_glibcxx_need" "$_f" && grep -qa "$_drt_cxxabi_need" "$_f"; then DRT_BUNDLE_CXX=host; fi
    break
  done
fi
export DRT_BUNDLE_CXX

_drt_ld=$DRT_BUNDLE/lib
if [[ $DRT_BUNDLE_CXX == bundled ]]; then _drt_ld=$_drt_ld:$DRT_BUNDLE/lib/cxx; fi
export PATH=$DRT_BUNDLE/bin:$PATH
export LD_LIBRARY_PATH=$_drt_ld${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}
for _d in "${_drt_cuda_dirs[@]}"; do
  case ":$LD_LIBRARY_PATH:" in *":$_d:"*) ;; *) LD_LIBRARY_PATH=$LD_LIBRARY_PATH:$_d ;; esac
done
DRT_CUDA_LIB_DIRS=$(IFS=:; echo "${_drt_cuda_dirs[*]}")
export DRT_CUDA_LIB_DIRS

# Open MPI and PMIx in a flat layout (Debian's libdir, pkglibdir and sysconfdir are absolute).
export OPAL_PREFIX=$DRT_BUNDLE OPAL_LIBDIR=$DRT_BUNDLE/lib OPAL_PKGLIBDIR=$DRT_BUNDLE/lib/openmpi3
export OPAL_SYSCONFDIR=$DRT_BUNDLE/etc OPAL_BINDIR=$DRT_BUNDLE/bin OPAL_DATADIR=$DRT_BUNDLE/share
export OPAL_PKGDATADIR=$DRT_BUNDLE/share/openmpi
export PMIX_PREFIX=$DRT_BUNDLE PMIX_LIBDIR=$DRT_BUNDLE/lib PMIX_PKGLIBDIR=$DRT_BUNDLE/lib/pmix
export PMIX_PKGDATADIR=$DRT_BUNDLE/share/pmix PMIX_SYSCONFDIR=$DRT_BUNDLE/etc
export PMIX_MCA_mca_base_component_path=$DRT_BUNDLE/lib/pmix
export HWLOC_PLUGINS_PATH=$DRT_BUNDLE/lib/hwloc  # empty on purpose: no host hwloc plugins
if [[ $(id -u) == 0 ]]; then export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1; fi
unset _d _s _f _drt_ld _drt_cxx _drt_sites _drt_cuda_dirs _drt_ldconfig _drt_glibcxx_need _drt_cxxabi_need
unset -f _drt_add_cuda_dir
EOF

# ---------------------------------------------------------------------------------------------
# 9. BUNDLE_INFO.json
json_list() { local x s=""; for x in "$@"; do s+="${s:+, }\"$x\""; done; echo "[$s]"; }
cat > "$B/BUNDLE_INFO.json" <<EOF
{
  "created": "$(date -u +%Y-%m-%dT%H:%M:%SZ)",
  "build_host": "$(uname -n)", "build_os": "$(. /etc/os-release && echo "$PRETTY_NAME")",
  "git_head": "$(git -C "$ROOT" rev-parse --short HEAD 2>/dev/null || echo unknown)",
  "git_dirty": $([[ -n $(git -C "$ROOT" status --porcelain -uno 2>/dev/null) ]] && echo true || echo false),
  "build_dir": "$BUILD",
  "programs": $(json_list "${PRESENT[@]}"),
  "programs_missing": $(json_list "${MISSING[@]}"),
  "drtrain_sha256": "$(sha256sum "$B/bin/drtrain" | cut -c1-16)",
  "glibc_required": "${GLIBC_FLOOR#GLIBC_}",
  "glibc_required_with_lib_cxx": "${GLIBC_FLOOR_CXX#GLIBC_}",
  "glibc_floor_files": $(json_list $FLOOR_FILES),
  "glibcxx_required": "$GLIBCXX_NEED", "cxxabi_required": "$CXXABI_NEED",
  "libevent_rebuilt": $LIBEVENT_REBUILT,
  "cuda_sonames_from_host": $(json_list $CUDA_LIST),
  "openmpi_plugins_left_out": $(json_list "${SKIPPED_PLUGINS[@]}")
}
EOF

# ---------------------------------------------------------------------------------------------
# 10. The tarball (one flavour only: the other is removed).
mkdir -p "$(dirname "$OUT")"
OUT=$(cd "$(dirname "$OUT")" && pwd)/$(basename "$OUT")
rm -f "${OUT%.tar.*}".tar.gz "${OUT%.tar.*}".tar.xz
UNPACKED=$(du -sm "$B" | cut -f1)
say "packing $UNPACKED MiB into $OUT ($COMPRESS) ..."
if [[ $COMPRESS == xz ]]; then
  tar -C "$TMP" -cf - drtrain-gpu | xz -T0 -6 > "$OUT.part"
else
  tar -C "$TMP" -cf - drtrain-gpu | gzip -6 > "$OUT.part"
fi
mv "$OUT.part" "$OUT"
SIZE=$(stat -c %s "$OUT")
say "wrote $OUT: $((SIZE / 1048576)) MiB ($SIZE bytes), $UNPACKED MiB unpacked"
(( SIZE < 56 * 1048576 )) || warn "the tarball is over 56 MiB: with the repo it may exceed the device tool's 64 MiB (try --xz)"
[[ -n $KEEP ]] && { mkdir -p "$KEEP"; rm -rf "${KEEP:?}/drtrain-gpu"; cp -a "$B" "$KEEP/"; say "staging copy in $KEEP/drtrain-gpu"; }
[[ ${#MISSING[@]} == 0 ]] || warn "not in the bundle (not built): ${MISSING[*]}"

[[ $VERIFY == 1 ]] && verify_bundle
exit 0
