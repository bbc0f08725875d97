#!/usr/bin/env bash
# Download the project's dependencies, except torch, as wheels for an offline install on a
# machine of another Python version or platform (a GPU box without internet access).
#
#   scripts/make_wheelhouse.sh                        # Python 3.12, glibc >= 2.28 x86_64
#   scripts/make_wheelhouse.sh -p 3.11 -g 2.17 -o /media/usb/wheelhouse
#   scripts/make_wheelhouse.sh -n                     # print the pip commands, download nothing
#   scripts/make_wheelhouse.sh -o /tmp/wh tqdm        # only the named packages (a quick check)
#
# Requirements come from pyproject.toml: the dependencies, the extras of -e and the build
# system (so ``pip install -e .`` works offline), minus torch, which is installed from
# PyTorch's index for the target's CUDA version. Wheels only (--only-binary=:all:), except
# the pure-Python packages of SDIST_ONLY, published as source only: they are built into
# py3-none-any wheels here first, which install on any target.
set -euo pipefail

SDIST_ONLY=("antlr4-python3-runtime==4.9.*")  # hydra-core's and omegaconf's parser runtime

usage() { sed -n '2,14p' "$0" | sed 's/^# \{0,1\}//'; }

root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
python_version=3.12
glibc=2.28                 # newest glibc of the target; older manylinux wheels are taken too
arch=x86_64
extras=export,plot,video,test
out="$root/wheelhouse"
dry_run=0
while getopts "p:g:a:e:o:nh" opt; do
  case "$opt" in
    p) python_version=$OPTARG ;;
    g) glibc=$OPTARG ;;
    a) arch=$OPTARG ;;
    e) extras=$OPTARG ;;
    o) out=$OPTARG ;;
    n) dry_run=1 ;;
    h) usage; exit 0 ;;
    *) usage >&2; exit 2 ;;
  esac
done
shift $((OPTIND - 1))

if [[ $# -gt 0 ]]; then
  requirements=("$@")
else
  # tomllib needs Python >= 3.11 on this machine (the target version is -p).
  listed=$(python3 - "$root/pyproject.toml" "$extras" <<'EOF'
import re
import sys
import tomllib

with open(sys.argv[1], "rb") as f:
    project = tomllib.load(f)
wanted = [e for e in sys.argv[2].split(",") if e]
optional = project["project"].get("optional-dependencies", {})
unknown = sorted(set(wanted) - set(optional))
if unknown:
    sys.exit(f"unknown extras {unknown}; valid: {sorted(optional)}")
reqs = project["build-system"]["requires"] + project["project"]["dependencies"]
for extra in wanted:
    reqs += optional[extra]
for req in dict.fromkeys(reqs):
    if re.split(r"[\s<>=!~\[;]", req, maxsplit=1)[0].lower() != "torch":
        print(req)
EOF
  )
  mapfile -t requirements <<< "$listed"
fi

glibc_minor=${glibc#*.}
platforms=(--platform "manylinux2014_$arch")  # pip adds manylinux2010 / manylinux1
for minor in $(seq 17 "$glibc_minor"); do
  platforms+=(--platform "manylinux_2_${minor}_$arch")
done
abi="cp${python_version/./}"
build=(python3 -m pip wheel --no-deps --wheel-dir "$out" "${SDIST_ONLY[@]}")
download=(python3 -m pip download --only-binary=:all: --dest "$out" --find-links "$out"
          --python-version "$python_version" --implementation cp
          --abi "$abi" --abi abi3 --abi none "${platforms[@]}" "${requirements[@]}")

if [[ $dry_run -eq 1 ]]; then
  printf '%q ' "${build[@]}"
  printf '\n'
  printf '%q ' "${download[@]}"
  printf '\n'
  exit 0
fi
mkdir -p "$out"
"${build[@]}"
"${download[@]}"

cat <<EOF

Wheelhouse: $out ($(find "$out" -name '*.whl' | wc -l) wheels). On the offline machine
(Python $python_version, $arch, glibc >= $glibc), in a checkout of this repository:
  python$python_version -m venv .venv && . .venv/bin/activate
  pip install --no-index --find-links <torch wheels> torch   # not in this wheelhouse
  pip install --no-index --find-links $out -e ".[$extras]"
EOF
