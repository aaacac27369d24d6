#!/usr/bin/env bash
# Builds the sandbox image offline (no registry): a root filesystem holding only
# the system's Python 3.11, its standard library and the shared libraries they
# link against, imported with `docker import`. No shell, no package manager.
# Usage: docker/build_image.sh [TAG]   (default populora-sandbox:py3.11)
set -euo pipefail
tag="${1:-populora-sandbox:py3.11}"
python="${SANDBOX_PYTHON:-/usr/bin/python3.11}"
recipe=$(sha256sum "$0" | cut -c1-16)

if ! docker info >/dev/null 2>&1; then
  echo "build_image: no Docker engine answers; start one with 'make dockerd'" >&2
  exit 1
fi
have=$(docker image inspect --format '{{ index .Config.Labels "populora.recipe" }}' "$tag" 2>/dev/null || true)
if [ "$have" = "$recipe" ]; then
  echo "build_image: $tag is up to date (recipe $recipe)"
  exit 0
fi
if [ ! -x "$python" ]; then
  echo "build_image: $python not found; install it with 'apt-get install -y python3.11'" >&2
  exit 1
fi

root=$(mktemp -d)
trap 'rm -rf "$root"' EXIT
stdlib=$("$python" -I -S -c 'import sysconfig; print(sysconfig.get_paths()["stdlib"])')
mkdir -p "$root/usr/bin" "$root/tmp" "$root/etc" "$root$stdlib"
cp -L "$python" "$root/usr/bin/python3.11"
ln -s python3.11 "$root/usr/bin/python3"
# The standard library, without tests, GUI toolkits and installers.
tar -C "$stdlib" -cf - \
  --exclude=./test --exclude=./idlelib --exclude=./tkinter --exclude=./turtledemo \
  --exclude=./ensurepip --exclude=./lib2to3 --exclude=./site-packages --exclude=./dist-packages . \
  | tar -C "$root$stdlib" -xf -
# Shared libraries of the interpreter and of every extension module.
{ ldd "$python"; find "$root$stdlib" -name '*.so' -exec ldd {} \; ; } 2>/dev/null \
  | grep -oE '/[^ ]+\.so[^ ]*' | sort -u | while read -r lib; do
    [ -e "$lib" ] || continue
    mkdir -p "$root$(dirname "$lib")"
    cp -L "$lib" "$root$lib"
  done
for link in lib lib64 bin; do
  [ -L "/$link" ] && ln -s "$(readlink "/$link")" "$root/$link"
done
printf 'root:x:0:0:root:/:/nonexistent\nnobody:x:65534:65534:nobody:/:/nonexistent\n' > "$root/etc/passwd"
printf 'root:x:0:\nnogroup:x:65534:\n' > "$root/etc/group"
chmod 1777 "$root/tmp"
tar -C "$root" --numeric-owner --owner=0 --group=0 -cf - . \
  | docker import --change "LABEL populora.recipe=$recipe" --change 'CMD ["python3"]' - "$tag" >/dev/null
size=$(docker image inspect --format '{{.Size}}' "$tag")
echo "build_image: built $tag ($((size / 1024 / 1024)) MB, recipe $recipe)"
