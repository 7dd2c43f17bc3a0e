#!/usr/bin/env bash
# gpu-kit.sh OUTDIR: build the GPU kit, the checks of a GPU day that run
# on a machine with no Go toolchain and no network (the project's GPU
# machine: an NVIDIA H200, driver 580, CUDA 13, Python 3.12 with PyTorch,
# NVIDIA's Vulkan ICD but no Vulkan loader).
#
# Here, with Go (CGO_ENABLED=0, -trimpath, stripped with -ldflags='-s -w'):
#
#   test/cuda.test     package cuda's tests and benchmarks (go test -c)
#   test/vulkan.test   package vulkan's
#   test/gpumem.test   the root package's: gpu-check.sh runs only the
#                      shadow model on the Vulkan backend from it
#                      (-test.run '^TestShadowModelOnVulkan$')
#   bin/gpumem         the CLI (info; advise -json for torch-check.py)
#   bin/oomcheck       a real out-of-memory through each backend
#                      (scripts/gpukit/oomcheck)
#   bin/example-basic, bin/example-cuda, bin/example-vulkan
#   tree/              what the test binaries read from their package's
#                      directory (cuda/testdata, vulkan/shaders, the
#                      scripts they parse), laid out as in the repository;
#                      each binary runs in its package's folder there
#   vulkan/lib         the Vulkan loader from Debian's libvulkan1
#                      (apt-get download, dpkg-deb -x)
#   vulkan/glvnd       libGLdispatch.so.0 from libglvnd0, which NVIDIA's
#                      ICD library needs, for a machine that lacks it
#   vulkan/egl         libEGL.so.1 (libegl1) and libGLX.so.0 (libglx0),
#                      glvnd's dispatchers: NVIDIA's ICD library opens
#                      libEGL.so.1 while it starts and, without it, gives
#                      the loader no vkCreateInstance
#                      (VK_ERROR_INCOMPATIBLE_DRIVER); gpu-check.sh puts
#                      them on the path only when Vulkan fails without
#                      (its "egl" variant)
#   vulkan/layers      the Khronos validation layer (vulkan-validationlayers)
#
# all packed in OUTDIR/kit.tar.gz, beside OUTDIR/gpu-check.sh (which
# unpacks it), OUTDIR/torch-check.py and OUTDIR/MANIFEST.txt (commit, Go
# version, every file with its size, the steps gpu-check.sh runs). The kit
# must stay within 60 MiB; the build fails otherwise.
#
# A package that apt-get cannot download (no apt, no network) is taken
# from apt's cache if it is there, else left out and MANIFEST.txt says
# so: without a loader on the machine gpu-check.sh then skips the Vulkan
# steps with that reason.
#
# Then, on the GPU machine: bash OUTDIR/gpu-check.sh RESULTS
set -euo pipefail

usage() {
	echo "usage: $0 OUTDIR" >&2
	exit 2
}
[ $# -eq 1 ] || usage
case "$1" in -h | --help) usage ;; esac

root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
out="$1"
if [ -e "$out" ] && [ -n "$(find "$out" -mindepth 1 -maxdepth 1 ! -name .gitignore -print -quit 2>/dev/null)" ] && [ ! -e "$out/MANIFEST.txt" ]; then
	echo "gpu-kit: $out exists, is not empty and holds no kit (MANIFEST.txt): refusing to replace it" >&2
	exit 2
fi
# Everything is built in a temporary folder first: OUTDIR is replaced only
# by a complete kit.
dest="$(mkdir -p "$out" && cd "$out" && pwd)"
stage="$(mktemp -d)"
trap 'rm -rf "$stage"' EXIT
out="$stage/out"
mkdir -p "$out"
k="$stage/kit"
mkdir -p "$k/bin" "$k/test" "$k/tree" "$k/vulkan"
notes="$stage/notes"
: >"$notes"
start=$SECONDS

cd "$root"
command -v go >/dev/null || {
	echo "gpu-kit: go not found: the kit is built on a development machine" >&2
	exit 1
}
export CGO_ENABLED=0 GOOS=linux GOARCH=amd64
flags=(-trimpath "-ldflags=-s -w")
module="$(go list -m)"

echo "== test binaries (go test -c): cuda, vulkan, root"
go test -c "${flags[@]}" -o "$k/test/" ./cuda ./vulkan .
for t in cuda vulkan gpumem; do
	[ -x "$k/test/$t.test" ] || {
		echo "gpu-kit: go test -c made no $t.test" >&2
		exit 1
	}
done

echo "== the CLI, oomcheck and the examples (go build)"
go build "${flags[@]}" -o "$k/bin/gpumem" ./cmd/gpumem
go build "${flags[@]}" -o "$k/bin/oomcheck" ./scripts/gpukit/oomcheck
for e in basic cuda vulkan; do
	go build "${flags[@]}" -o "$k/bin/example-$e" "./examples/$e"
done

echo "== the files the test binaries read"
# Each test binary runs in its package's folder under tree/, as go test
# runs it in the package's directory: cuda reads testdata/user.ptx and
# parses ../scripts/gpu-check.sh; vulkan reads shaders/ and
# ../scripts/vulkan-shaders.sh. Built with -trimpath, the fake CUDA driver's
# source (internal/fakecuda finds it from its own file's path) is looked
# up relative to that folder, as MODULE/cuda/testdata/fakecuda.c.
mkdir -p "$k/tree/cuda" "$k/tree/vulkan" "$k/tree/scripts" "$k/tree/cuda/$module/cuda"
cp -R cuda/testdata "$k/tree/cuda/"
rm -rf "$k/tree/cuda/testdata/build"
cp -R cuda/testdata "$k/tree/cuda/$module/cuda/"
rm -rf "$k/tree/cuda/$module/cuda/testdata/build"
cp -R vulkan/shaders "$k/tree/vulkan/"
cp scripts/gpu-check.sh scripts/vulkan-shaders.sh "$k/tree/scripts/"

echo "== the Vulkan loader and what it needs (Debian packages)"
debs="$stage/debs"
mkdir -p "$debs"
arch="$(dpkg --print-architecture 2>/dev/null || echo unknown)"
suffix=""
[ "$arch" = amd64 ] || suffix=":amd64"
# fetch PKG: the package's .deb into $debs (apt-get download, else apt's
# cache), or a note saying why not.
fetch() {
	local pkg=$1 why=""
	if command -v apt-get >/dev/null 2>&1; then
		if (cd "$debs" && apt-get download -q "$pkg$suffix" >"$stage/apt-$pkg.log" 2>&1); then
			return 0
		fi
		why="apt-get download $pkg failed: $(tail -n 1 "$stage/apt-$pkg.log")"
	else
		why="no apt-get here"
	fi
	local cached
	# shellcheck disable=SC2012 # ls -t: the newest; the names are Debian's
	cached="$(ls -t /var/cache/apt/archives/"${pkg}"_*_amd64.deb 2>/dev/null | head -n 1 || true)"
	if [ -n "$cached" ]; then
		cp "$cached" "$debs/"
		echo "$pkg: $why; taken from apt's cache ($(basename "$cached"))" >>"$notes"
		return 0
	fi
	echo "$pkg: NOT INCLUDED: $why, and apt's cache holds none" >>"$notes"
	return 1
}
# unpack PKG: its .deb's files under $stage/x/PKG; prints that folder.
unpack() {
	local pkg=$1 deb
	for deb in "$debs/${pkg}"_*.deb; do
		break
	done
	mkdir -p "$stage/x/$pkg"
	dpkg-deb -x "$deb" "$stage/x/$pkg"
	echo "$pkg: $(basename "$deb")" >>"$notes"
	echo "$stage/x/$pkg"
}
lib=usr/lib/x86_64-linux-gnu
if fetch libvulkan1; then
	x="$(unpack libvulkan1)"
	mkdir -p "$k/vulkan/lib"
	cp -L "$x/$lib/libvulkan.so.1" "$k/vulkan/lib/libvulkan.so.1"
fi
if fetch libglvnd0; then
	x="$(unpack libglvnd0)"
	mkdir -p "$k/vulkan/glvnd"
	cp -L "$x/$lib/libGLdispatch.so.0" "$k/vulkan/glvnd/libGLdispatch.so.0"
fi
mkdir -p "$k/vulkan/egl"
if fetch libegl1; then
	x="$(unpack libegl1)"
	cp -L "$x/$lib/libEGL.so.1" "$k/vulkan/egl/libEGL.so.1"
fi
if fetch libglx0; then
	x="$(unpack libglx0)"
	cp -L "$x/$lib/libGLX.so.0" "$k/vulkan/egl/libGLX.so.0"
fi
if fetch vulkan-validationlayers; then
	x="$(unpack vulkan-validationlayers)"
	mkdir -p "$k/vulkan/layers"
	cp -L "$x/$lib/libVkLayer_khronos_validation.so" "$k/vulkan/layers/"
	# The manifest names the library by file name (found through the
	# linker's path); beside it, "./" makes it relative to the manifest.
	sed 's#"library_path": *"libVkLayer_khronos_validation.so"#"library_path": "./libVkLayer_khronos_validation.so"#' \
		"$x/usr/share/vulkan/explicit_layer.d/VkLayer_khronos_validation.json" >"$k/vulkan/layers/VkLayer_khronos_validation.json"
	grep -q '"\./libVkLayer_khronos_validation.so"' "$k/vulkan/layers/VkLayer_khronos_validation.json" || {
		echo "gpu-kit: the validation layer's manifest did not take the relative library path" >&2
		exit 1
	}
fi

echo "== packing"
tar -C "$stage" -czf "$out/kit.tar.gz" kit
cp scripts/gpu-check.sh "$out/gpu-check.sh"
cp scripts/torch-check.py "$out/torch-check.py"
chmod +x "$out/gpu-check.sh" "$out/torch-check.py"

commit="$(git rev-parse HEAD 2>/dev/null || echo unknown)"
if [ -n "$(git status --porcelain --untracked-files=no 2>/dev/null)" ]; then
	commit="$commit (with uncommitted changes)"
fi
{
	echo "gpumem GPU kit"
	echo "commit: $commit"
	echo "module: $module"
	echo "built: $(date -u +%Y-%m-%dT%H:%M:%SZ) on $(uname -srm)"
	echo "go: $(go version) (CGO_ENABLED=0, -trimpath, -ldflags='-s -w')"
	echo
	echo "Debian packages:"
	sed 's/^/  /' "$notes"
	echo
	echo "Files (bytes):"
	for f in gpu-check.sh torch-check.py kit.tar.gz; do
		printf '  %10d  %s\n' "$(wc -c <"$out/$f")" "$f"
	done
	echo
	echo "kit.tar.gz unpacked (bytes):"
	(cd "$stage" && find kit -type f | LC_ALL=C sort | while read -r f; do
		printf '  %10d  %s\n' "$(wc -c <"$f")" "$f"
	done)
	echo
	echo "Steps (bash gpu-check.sh -list):"
	bash "$out/gpu-check.sh" -list | sed 's/^/  /'
} >"$out/MANIFEST.txt"

total="$(du -cb "$out"/* | tail -n 1 | cut -f1)"
printf '  %10d  total (this folder)\n' "$total" >>"$out/MANIFEST.txt"
if [ "$total" -gt $((60 * 1024 * 1024)) ]; then
	echo "gpu-kit: the kit is $total bytes, over 60 MiB" >&2
	exit 1
fi
rm -rf "$dest"
mkdir -p "$dest"
mv "$out"/* "$dest/"
# git ignores the kit wherever it is built (so a device run carries it as
# an ignored path, and no commit takes its binaries along).
printf '*\n' >"$dest/.gitignore"
echo "kit: $dest, $((total / 1024 / 1024)) MiB ($total bytes) in $((SECONDS - start)) s"
if grep -q 'NOT INCLUDED' "$notes"; then
	grep 'NOT INCLUDED' "$notes" | sed 's/^/warning: /' >&2
fi
