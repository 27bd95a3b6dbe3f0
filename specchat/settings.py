"""What the chat keeps on disk: its settings, and every conversation as a transcript.

Settings live in the platform's config directory, transcripts and exports in its data directory
(platformdirs); SPECCHAT_HOME puts both under one directory instead.
"""

from __future__ import annotations

import json
import os
import tempfile
import time
from dataclasses import asdict, dataclass, field, fields
from pathlib import Path

from platformdirs import user_config_path, user_data_path

from engine import SamplingParams

APP = "specchat"


def config_dir() -> Path:
    home = os.environ.get("SPECCHAT_HOME")
    return Path(home) / "config" if home else user_config_path(APP)


def data_dir() -> Path:
    home = os.environ.get("SPECCHAT_HOME")
    return Path(home) / "data" if home else user_data_path(APP)


def write_atomically(path: Path, text: str, shared: bool = False) -> None:
    """Write to a temporary file beside `path`, then rename it over: a crash leaves the old file or
    the new one, never half of one. The file is the user's alone (a temporary file's mode) unless
    `shared`: an export gets the permissions a plain write would give it."""
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    try:
        if shared:
            umask = os.umask(0)
            os.umask(umask)
            os.chmod(tmp, 0o666 & ~umask)
        with os.fdopen(fd, "w", encoding="utf-8") as f:
            f.write(text)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


@dataclass
class Settings:
    temperature: float = 0.0
    top_k: int = 0
    top_p: float = 1.0
    seed: int = 0
    max_tokens: int = 512
    system: str = ""
    proposer: str = "n-gram"
    k: int = 4
    teaching: bool = False
    markdown: bool = True  # finished replies as Markdown, not raw text
    theme: str = "textual-dark"

    def sampling(self) -> SamplingParams:
        """The sampling settings, checked (EngineError on a bad value)."""
        return SamplingParams(self.temperature, self.top_k, self.top_p, self.seed, self.max_tokens)

    @classmethod
    def load(cls) -> Settings:
        """Saved settings; defaults for anything missing, unreadable or of the wrong type."""
        try:
            saved = json.loads((config_dir() / "settings.json").read_text(encoding="utf-8"))
        except (OSError, ValueError):
            return cls()
        settings = cls()
        for f in fields(cls):
            value = saved.get(f.name) if isinstance(saved, dict) else None
            kind = type(getattr(settings, f.name))
            if kind is float and type(value) is int:
                value = float(value)
            if type(value) is kind:
                setattr(settings, f.name, value)
        return settings

    def save(self, this_run_only: dict | None = None) -> None:
        """Write the settings. `this_run_only`: values the command line gave for this run; where a
        setting still holds its flag's value, the value saved before is written instead."""
        kept = asdict(self)
        if this_run_only:
            before = asdict(Settings.load())
            kept.update({name: before[name] for name, value in this_run_only.items() if kept[name] == value})
        write_atomically(config_dir() / "settings.json", json.dumps(kept, indent=2))


@dataclass
class ChatRecord:
    """One conversation: what was said, by whom, and how each reply ended."""

    model: str
    system: str = ""
    messages: list[dict] = field(default_factory=list)  # {"role", "content"[, "finished", "stats"]}
    started: str = field(default_factory=lambda: time.strftime("%Y-%m-%d %H:%M:%S"))
    id: str = field(default_factory=lambda: time.strftime("%Y%m%d-%H%M%S-") + os.urandom(3).hex())
    unsent: list[str] = field(default_factory=list)  # messages queued behind a reply when the chat closed

    @property
    def path(self) -> Path:
        return data_dir() / "transcripts" / f"{self.id}.json"

    def history(self) -> list[dict]:
        """The turns in the form a chat template takes."""
        return [{"role": m["role"], "content": m["content"]} for m in self.messages]

    def save(self, unfinished: dict | None = None) -> Path:
        """Write the transcript; `unfinished`: a reply still being written, saved after the rest."""
        data = asdict(self)
        if unfinished:
            data["messages"].append(unfinished)
        write_atomically(self.path, json.dumps(data, indent=2, ensure_ascii=False))
        return self.path

    @classmethod
    def read(cls, path: Path) -> ChatRecord:
        """The chat saved in `path`; ValueError with one line saying why when it cannot be read."""
        try:
            data = json.loads(path.read_text(encoding="utf-8"))
        except OSError as err:
            raise ValueError(f"cannot be read: {err.strerror}") from None
        except ValueError as err:  # JSONDecodeError, UnicodeDecodeError
            raise ValueError(f"not JSON ({str(err).splitlines()[0][:60]})") from None
        try:
            record = cls(data["model"], data.get("system", ""), list(data["messages"]), data["started"], path.stem,
                         [str(text) for text in data.get("unsent", [])])
        except (KeyError, TypeError, AttributeError):
            raise ValueError("not a specchat transcript (model, started or messages missing)") from None
        if not all(
            isinstance(m, dict) and m.get("role") in ("user", "assistant") and isinstance(m.get("content"), str)
            for m in record.messages
        ):
            raise ValueError("not a specchat transcript (a message without a role or text)")
        return record

    @classmethod
    def saved(cls) -> list[Path]:
        """Every saved transcript's file, the latest first (ids start with the time they began)."""
        return sorted((data_dir() / "transcripts").glob("*.json"), reverse=True)

    @classmethod
    def latest(cls, skip: str = "") -> ChatRecord | None:
        """The chat saved last with something said in it, other than the one called `skip`; None when
        there is none that can be read."""
        for path in cls.saved():
            if path.stem == skip:
                continue
            try:
                record = cls.read(path)
            except ValueError:
                continue
            if record.messages:
                return record
        return None

    def markdown(self) -> str:
        lines = [f"# specchat · {self.model} · {self.started}", ""]
        if self.system:
            lines += [f"*System:* {self.system}", ""]
        for m in self.messages:
            who = "You" if m["role"] == "user" else "Model"
            lines += [f"## {who}", "", m["content"], ""]
            if m.get("finished") in ("cancelled", "unfinished"):
                lines += [f"*({'stopped' if m['finished'] == 'cancelled' else 'unfinished'})*", ""]
            if m.get("stats"):
                lines += [f"*{m['stats']}*", ""]
        for text in self.unsent:
            lines += ["## You (not sent)", "", text, ""]
        return "\n".join(lines)

    def export(self, path: Path | None = None) -> Path:
        """Write the chat as Markdown to `path`: a file, or a folder to write it into."""
        path = path or data_dir() / "exports"
        if path.is_dir() or path == data_dir() / "exports":
            path = path / f"{self.id}.md"
        write_atomically(path, self.markdown(), shared=True)
        return path
