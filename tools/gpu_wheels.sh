#!/usr/bin/env bash
# What tools/gpu_runs.sh needs on the GPU machine beyond its image, fetched here into .whl/ (ignored
# by git; the device call carries it): the wheels of the Python packages the image lacks, for
# CPython 3.12 on manylinux x86_64, one pinned version each, and the two corpora, which nothing
# there can download.
#
#   bash tools/gpu_wheels.sh           # fetch (pip download; a wheel already there is kept)
#   bash tools/gpu_wheels.sh --print   # the pinned list, NAME==VERSION a line; fetches nothing
#
# The image has PyTorch, numpy, sentencepiece, tqdm, filelock, matplotlib, seaborn, requests, typer,
# click, jinja2, httpx, regex, joblib and sacreBLEU's needs, but not spaCy (word-level runs), nltk
# (§6.3's treebank), pydantic and spaCy's other needs. sacreBLEU and typing-extensions are carried
# for their versions (the scores name sacreBLEU's; pydantic needs typing-extensions >= 4.16), and
# setuptools because pyproject.toml's build backend needs >= 77 for the editable install.
#
# spaCy's, thinc's and blis's compiled modules are shipped with their debug information (spaCy's
# wheel is 35 MB, 6 of it code); `strip --strip-debug` takes it out of each .so and the wheel is
# written again with its RECORD's hashes renewed, so all of .whl/ and the repository stay well under
# the 64 MiB a device call may carry. The code itself is unchanged. After fetching, each wheel's
# Requires-Dist is checked against what .whl/ and the image hold, and the total size is printed.
#
# The corpora: Multi30k's German and English files from $MULTI30K_DIR, ../shared/data/multi30k or
# the download cache, into .whl/multi30k; the Penn Treebank sample's treebank.zip from
# $TREEBANK_DIR or ../shared/data/treebank, into .whl/treebank (its licence: non-commercial use
# only; it is never committed). tools/gpu_runs.sh reads them from there unless told otherwise.
set -euo pipefail
cd "$(dirname "$0")/.."

WHEELS=(
  spacy==3.8.18 spacy-legacy==3.0.12 spacy-loggers==1.0.5 thinc==8.3.14 blis==1.3.4
  murmurhash==1.0.16 cymem==2.0.16 preshed==3.0.15 srsly==2.5.6 catalogue==2.0.10 wasabi==1.1.3
  confection==1.3.4 weasel==1.0.1 cloudpathlib==0.26.0 smart-open==9.0.2
  pydantic==2.14.4 pydantic-core==2.50.5 annotated-types==0.8.0 typing-inspection==0.4.5
  typing-extensions==4.16.0
  nltk==3.10.4 defusedxml==0.7.1
  sacrebleu==2.6.0
  setuptools==84.2.1
)
# What the image holds that the wheels above ask for (their Requires-Dist, checked after fetching)
IMAGE_HAS="numpy requests typer click tqdm jinja2 packaging httpx wrapt regex joblib portalocker
tabulate colorama lxml setuptools typing-extensions"

case "${1:-}" in
  --print)
    printf '%s\n' "${WHEELS[@]}"
    exit 0
    ;;
  "") ;;
  *)
    echo "tools/gpu_wheels.sh: unknown argument '$1' (usage: tools/gpu_wheels.sh [--print])" >&2
    exit 2
    ;;
esac

dest=.whl
mkdir -p "$dest"
echo "== the wheels, for CPython 3.12 on manylinux x86_64, into $dest/"
missing=()
for pin in "${WHEELS[@]}"; do  # a wheel already here is kept (stripped, its hash is not PyPI's)
  name=${pin%%==*}
  compgen -G "$dest/${name//-/_}-${pin#*==}-*.whl" > /dev/null || missing+=("$pin")
done
[ ${#missing[@]} -eq 0 ] || python3 -m pip download -q --disable-pip-version-check --no-deps \
  --only-binary=:all: \
  --python-version 3.12 --implementation cp \
  --platform manylinux_2_28_x86_64 --platform manylinux_2_27_x86_64 \
  --platform manylinux_2_24_x86_64 --platform manylinux_2_17_x86_64 \
  --platform manylinux2014_x86_64 --platform manylinux1_x86_64 \
  -d "$dest" "${missing[@]}"

echo "== one version of each, debug information stripped, every need met"
python3 - "$dest" "$IMAGE_HAS" "${WHEELS[@]}" <<'EOF'
import base64, csv, hashlib, io, re, shutil, subprocess, sys, tempfile, zipfile
from email.parser import Parser
from pathlib import Path

try:
    from packaging.requirements import Requirement
    from packaging.utils import canonicalize_name, parse_wheel_filename
except ImportError:  # pip's own copy
    from pip._vendor.packaging.requirements import Requirement
    from pip._vendor.packaging.utils import canonicalize_name, parse_wheel_filename

dest, image, pins = Path(sys.argv[1]), sys.argv[2].split(), sys.argv[3:]
wanted = {canonicalize_name(n): v for n, v in (p.split("==") for p in pins)}
wheels = {}
for wheel in sorted(dest.glob("*.whl")):
    name, version, _, _ = parse_wheel_filename(wheel.name)
    if wanted.get(name) != str(version):  # another version, left by an earlier pin: two stop pip
        print(f"   removed {wheel.name} (not pinned)")
        wheel.unlink()
    else:
        wheels[name] = wheel
missing = set(wanted) - set(wheels)
if missing:
    sys.exit(f"tools/gpu_wheels.sh: no wheel for {', '.join(sorted(missing))}")


def digest(data: bytes) -> str:
    return "sha256=" + base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=").decode()


def strip_debug(wheel: Path) -> int:
    "Strip the debug information from the wheel's .so files; the bytes saved (0: left alone)."
    if not shutil.which("strip"):
        print(f"   {wheel.name}: left as it is (no strip here: binutils)")
        return 0
    with zipfile.ZipFile(wheel) as z:
        items = [(info, z.read(info)) for info in z.infolist()]
    changed, saved = {}, 0
    with tempfile.TemporaryDirectory() as tmp:
        for info, data in items:
            if re.search(r"\.so(\.\d+)*$", info.filename) and b".debug_info" in data:
                so = Path(tmp) / "module.so"
                so.write_bytes(data)
                subprocess.run(["strip", "--strip-debug", str(so)], check=True)
                if len(stripped := so.read_bytes()) < len(data) - 2**16:  # worth a new wheel
                    changed[info.filename] = stripped
                    saved += len(data) - len(stripped)
    if not changed:
        return 0
    contents = {info.filename: data for info, data in items}
    record = next(path for path in contents if path.endswith(".dist-info/RECORD"))
    rows = list(csv.reader(io.StringIO(contents[record].decode())))
    for row in rows:
        if row and row[0] in changed:
            row[1:] = [digest(changed[row[0]]), str(len(changed[row[0]]))]
    out = io.StringIO()
    csv.writer(out, lineterminator="\n").writerows(rows)
    contents.update(changed)
    contents[record] = out.getvalue().encode()
    tmp_wheel = wheel.with_suffix(".tmp")
    with zipfile.ZipFile(tmp_wheel, "w", zipfile.ZIP_DEFLATED) as z:
        for info, _ in items:
            z.writestr(info, contents[info.filename], compress_type=zipfile.ZIP_DEFLATED)
    tmp_wheel.replace(wheel)
    return saved


for name, wheel in wheels.items():
    if saved := strip_debug(wheel):
        print(f"   {wheel.name}: {saved / 2**20:.1f} MiB of debug information stripped")

held = set(wheels) | {canonicalize_name(n) for n in image}
env = {"python_version": "3.12", "python_full_version": "3.12.3", "sys_platform": "linux",
       "platform_system": "Linux", "platform_machine": "x86_64", "implementation_name": "cpython",
       "platform_python_implementation": "CPython", "os_name": "posix", "extra": ""}
unmet = []
for name, wheel in wheels.items():
    with zipfile.ZipFile(wheel) as z:
        meta = z.read(next(n for n in z.namelist() if n.endswith(".dist-info/METADATA")))
    for line in Parser().parsestr(meta.decode()).get_all("Requires-Dist") or []:
        need = Requirement(line)
        if need.marker is not None and not need.marker.evaluate(env):
            continue
        if canonicalize_name(need.name) not in held:
            unmet.append(f"{name} needs {need}")
if unmet:
    sys.exit("tools/gpu_wheels.sh: neither .whl nor the image holds: " + "; ".join(unmet))
print(f"   {len(wheels)} wheels, each need met by .whl or the image")
EOF

echo "== the corpora"
copy_multi30k() {
  local from
  for from in "${MULTI30K_DIR:-}" ../shared/data/multi30k \
      "${XDG_CACHE_HOME:-$HOME/.cache}/annotated-transformer/multi30k"; do
    [ -n "$from" ] && [ -f "$from/train.de.gz" ] || continue
    mkdir -p "$dest/multi30k"
    cp "$from"/{train,val,test_2016_flickr}.{de,en}.gz "$dest/multi30k/"
    echo "   Multi30k (de, en) from $from"
    return
  done
  echo "   no Multi30k here (set MULTI30K_DIR): the Multi30k steps will not find it there" >&2
}
copy_treebank() {
  local from
  for from in "${TREEBANK_DIR:-}" "${TREEBANK_DIR:-}/treebank.zip" \
      ../shared/data/treebank/treebank.zip; do
    [ -n "$from" ] && [ -f "$from" ] || continue
    mkdir -p "$dest/treebank"
    cp "$from" "$dest/treebank/treebank.zip"
    echo "   the Penn Treebank sample from $from"
    return
  done
  echo "   no treebank.zip here (set TREEBANK_DIR): the parser step will not find it there" >&2
}
copy_multi30k
copy_treebank

# what a device call sends: the tracked files and the untracked ones git does not ignore, and .whl/
tree=$(git ls-files -co --exclude-standard -z | du -cb --files0-from=- 2>/dev/null | tail -1)
tree=${tree%%[[:space:]]*}
carried=$(du -sb "$dest" | cut -f1)
mib() { awk -v b="$1" 'BEGIN { printf "%.1f MiB", b / 1048576 }'; }
echo "== $dest/: $(mib "$carried"); with the working tree ($(mib "$tree")):" \
  "$(mib $((tree + carried))) of the 64 MiB a device call may carry"
