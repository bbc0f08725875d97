#!/usr/bin/env bash
# The browser viewer's page as headless Chromium draws it (WebGL in software, no GPU):
#   bash scripts/screenshot_viewer.sh [checkpoint] [out.png] [play overrides...]
# Needs the viewer extra (pip install -e ".[viewer]") and Chromium (Debian: apt install
# chromium). Makes docs/figures/web_viewer.png with the defaults.
set -euo pipefail
checkpoint=${1:-pretrained:go1}
out=${2:-docs/figures/web_viewer.png}
shift $(( $# < 2 ? $# : 2 ))
port=${PORT:-8790}
locomotion-play checkpoint="$checkpoint" viewer=web web.host=127.0.0.1 web.port="$port" "$@" &
server=$!
profile=$(mktemp -d)
trap 'kill $server; rm -rf "$profile"' EXIT
until curl -sf -o /dev/null "http://127.0.0.1:$port"; do
    kill -0 $server || { echo "the viewer did not start" >&2; exit 1; }
    sleep 0.5
done
sleep 5  # the robots walk a few steps before the picture
chromium --headless --no-sandbox --disable-gpu --enable-unsafe-swiftshader \
    --use-angle=swiftshader --no-first-run --disable-background-networking \
    --disable-component-update --disable-sync --user-data-dir="$profile" \
    --window-size=1024,640 --virtual-time-budget=8000 --screenshot="$out" \
    "http://127.0.0.1:$port"
# a 128-colour palette: a third of the size, no visible change for flat-shaded meshes
python -c "import sys; from PIL import Image; Image.open(sys.argv[1]).quantize(128).save(sys.argv[1], optimize=True)" "$out"
