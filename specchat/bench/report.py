"""The bench's outputs: Markdown tables, a JSON file of every figure with its environment, and a
PNG chart of speedup against k (when matplotlib is installed)."""

from __future__ import annotations

import datetime
import json
import os
import platform
import subprocess
from pathlib import Path

import torch

from engine import AUTO, EngineError, find_spec
from specchat.bench.runs import SPECCHAT, TRANSFORMERS, best_k, k_rank, method_order

SCHEMA = 1
DASH = "–"


def environment(device, dtype, command: str) -> dict:
    """Where and how the figures were measured."""
    import transformers

    device = torch.device(device)
    if device.type == "cuda":
        hardware = torch.cuda.get_device_name(device)
    else:
        hardware = cpu_name()
    return {
        "device": str(device),
        "hardware": hardware,
        "dtype": str(dtype).removeprefix("torch."),
        "threads": torch.get_num_threads(),
        "torch": torch.__version__,
        "cuda": torch.version.cuda,
        "transformers": transformers.__version__,
        "python": platform.python_version(),
        "platform": platform.platform(),
        "commit": git_commit(),
        "date": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
        "command": command,
        "switches": switches(),
    }


PLACES = {"SPECCHAT_CACHE", "SPECCHAT_HOME", "SPECCHAT_WHEELS"}  # where files live, not how the engine runs


def switches() -> dict[str, str]:
    """The engine's SPECCHAT_ settings of the environment (the places of files aside): a figure
    taken with a fused kernel or a pass drafted ahead switched on says so."""
    return {k: v for k, v in sorted(os.environ.items()) if k.startswith("SPECCHAT_") and k not in PLACES}


def cpu_name() -> str:
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return f"CPU: {line.split(':', 1)[1].strip()}"
    except OSError:
        pass
    return f"CPU: {platform.processor() or platform.machine()}"


def git_commit() -> str | None:
    """The checkout's commit, with "+dirty" when files differ from it; None outside a checkout."""
    root = Path(__file__).resolve().parents[2]
    try:
        commit = subprocess.run(
            ["git", "-C", str(root), "rev-parse", "HEAD"],
            capture_output=True,
            text=True,
            check=False,
            timeout=10,
        ).stdout.strip()
        dirty = subprocess.run(
            ["git", "-C", str(root), "status", "--porcelain", "--untracked-files=no"],
            capture_output=True,
            text=True,
            check=False,
            timeout=10,
        ).stdout.strip()
    except (OSError, subprocess.SubprocessError):
        return None
    return (commit + ("+dirty" if dirty else "")) or None


def write_json(results: dict, path: Path) -> None:
    path.write_text(json.dumps(results, indent=1) + "\n")


def read_json(path: Path) -> dict:
    """An earlier run's bench.json."""
    try:
        results = json.loads(Path(path).read_text(encoding="utf-8"))
    except OSError as err:
        raise EngineError(f"cannot read {path}: {err.strerror}") from None
    except (UnicodeDecodeError, json.JSONDecodeError):
        raise EngineError(f"{path} is not a bench.json: not JSON") from None
    if not isinstance(results, dict) or results.get("schema") != SCHEMA:
        raise EngineError(f"{path} is not a bench.json of this version (schema {SCHEMA})")
    return results


def merge(runs: list[dict]) -> dict:
    """One result from several runs of the same target on the same machine (a long bench split by
    prompt, say). Each row keeps the speedup of its own run: ratios never cross runs."""
    first = runs[0]
    for other in runs[1:]:
        for part, key in (("settings", "model"), ("environment", "hardware"), ("environment", "dtype")):
            if other[part][key] != first[part][key]:
                raise EngineError(
                    f"cannot merge runs with different {key}: {first[part][key]!r} and {other[part][key]!r}"
                )
    rows = [r for run in runs for r in run["rows"]]
    keys = [(r["engine"], r["prompt"], r["sampling"], r["method"], r["k"]) for r in rows]
    if len(set(keys)) < len(keys):
        raise EngineError("cannot merge runs that measured the same row twice")
    prompts = {p["name"]: p for run in runs for p in run["prompts"]}
    return {
        **first,
        "environment": {
            **first["environment"],
            "command": " ; ".join(r["environment"]["command"] for r in runs),
        },
        "settings": {**first["settings"], "ks": sorted({k for run in runs for k in run["settings"]["ks"]}, key=k_rank)},
        "prompts": list(prompts.values()),
        "notes": list(dict.fromkeys(n for run in runs for n in run.get("notes", []))),
        "rows": rows,
        "best": best_k(rows),
    }


# ---- Markdown ------------------------------------------------------------------------------


def fmt(value, spec: str = ".1f", suffix: str = "") -> str:
    return DASH if value is None else f"{value:{spec}}{suffix}"


def sort_key(r: dict):
    order = method_order()
    return (order.index(r["method"]) if r["method"] in order else len(order), k_rank(r["k"]))


def sections(results: dict) -> list[tuple[dict, str]]:
    """(prompt, sampling) pairs in the order they ran."""
    prompts = {p["name"]: p for p in results["prompts"]}
    seen = []
    for r in results["rows"]:
        key = (r["prompt"], r["sampling"])
        if key not in seen:
            seen.append(key)
    return [(prompts[p], s) for p, s in seen]


OUR_COLUMNS = ["method", "k", "tok/s", "speedup", "tokens/step", "accepted", "propose ms", "verify ms",
               "same text"]


def our_cells(r: dict) -> list[str]:
    """The OUR_COLUMNS cells of one of our rows."""
    drafting = r["method"] != "plain"
    return [
        r["label"],
        str(r["k"]) if drafting else DASH,
        fmt(r["tok_s"]),
        fmt(r["speedup"], ".2f", "×"),
        fmt(r.get("tokens_per_step"), ".2f"),
        fmt(100 * r["acceptance_rate"], ".0f", " %") if drafting else DASH,
        fmt(r.get("propose_ms"), ".2f") if drafting else DASH,
        fmt(r.get("verify_ms"), ".2f"),
        same_text(r),
    ]


def table_head(head: list[str]) -> list[str]:
    return [f"| {' | '.join(head)} |", "|" + "---|" * len(head)]


def detail_table(results: dict, prompt: dict, sampling: str) -> str:
    """Every row of ours for one prompt and sampling, with transformers' same method beside it."""
    rows = [r for r in results["rows"] if r["prompt"] == prompt["name"] and r["sampling"] == sampling]
    ours = sorted((r for r in rows if r["engine"] == SPECCHAT), key=sort_key)
    heuristic = any(r.get("transformers_heuristic_tok_s") for r in ours)
    head = OUR_COLUMNS + ["transformers tok/s", "ours / theirs"]
    if heuristic:
        head += ["transformers heuristic tok/s", "ours / heuristic"]
    lines = table_head(head)
    for r in ours:
        cells = our_cells(r) + [fmt(r.get("transformers_tok_s")), fmt(r.get("ours_over_transformers"), ".2f", "×")]
        if heuristic:
            cells += [
                fmt(r.get("transformers_heuristic_tok_s")),
                fmt(r.get("ours_over_transformers_heuristic"), ".2f", "×"),
            ]
        lines.append(f"| {' | '.join(cells)} |")
    return "\n".join(lines)


def same_text(r: dict) -> str:
    """yes, or where the text parts from plain decoding's (NO where it should not: a
    deterministic proposer)."""
    if r["method"] == "plain" or r["same_text"] is None:
        return DASH
    if r["same_text"]:
        return "yes"
    where = f" (token {r['first_difference']})" if r.get("first_difference") is not None else ""
    return ("NO" if r["deterministic"] else "no") + where


def best_cell(results: dict, engine: str, prompt: str, sampling: str, method: str) -> str:
    for b in results["best"]:
        if (b["engine"], b["prompt"], b["sampling"], b["method"]) == (engine, prompt, sampling, method):
            return f"{b['speedup']:.2f}× (k = {b['k']})" if b["speedup"] is not None else DASH
    return DASH


def plain_tok_s(rows: list[dict], engine: str, prompt: str, sampling: str) -> float | None:
    return next(
        (
            r["tok_s"]
            for r in rows
            if (r["engine"], r["prompt"], r["sampling"], r["method"]) == (engine, prompt, sampling, "plain")
        ),
        None,
    )


def summary_table(results: dict) -> str:
    """The seed's table: per prompt, each method's speedup over plain decoding at its best k."""
    rows = results["rows"]
    present = {(r["engine"], r["method"]) for r in rows}
    order = method_order()[1:]
    ours = [m for m in order if (SPECCHAT, m) in present]
    theirs = [m for m in order if (TRANSFORMERS, m) in present]
    names = {r["method"]: r["label"] for r in rows if r["engine"] == SPECCHAT}
    their_names = {"ngram": "prompt lookup", "draft": "assistant", "draft-heuristic": "assistant, heuristic"}
    head = ["prompt", "plain tok/s", *(names[m] for m in ours)]
    # the seed's table ends with the tokens per step of its strongest proposer: here the last
    # registered one (auto is a choice among them, not a proposer of its own)
    per_step = next((m for m in reversed(ours) if m not in ("ngram", AUTO)), None)
    if per_step:
        head.append(f"{find_spec(per_step).label} tokens per step")
    if (TRANSFORMERS, "plain") in present:
        head += ["transformers plain tok/s", *(f"transformers {their_names[m]}" for m in theirs)]
    lines = [f"| {' | '.join(head)} |", "|" + "---|" * len(head)]
    for prompt, sampling in sections(results):
        name = prompt["title"] if sampling == "greedy" else f"{sampling}: {prompt['name']}"

        cells = [name, fmt(plain_tok_s(rows, SPECCHAT, prompt["name"], sampling))]
        cells += [best_cell(results, SPECCHAT, prompt["name"], sampling, m) for m in ours]
        if per_step:
            best = next(
                (
                    b
                    for b in results["best"]
                    if (b["engine"], b["prompt"], b["sampling"], b["method"])
                    == (SPECCHAT, prompt["name"], sampling, per_step)
                ),
                None,
            )
            cells.append(fmt(best and best["tokens_per_step"]))
        if (TRANSFORMERS, "plain") in present:
            cells.append(fmt(plain_tok_s(rows, TRANSFORMERS, prompt["name"], sampling)))
            cells += [best_cell(results, TRANSFORMERS, prompt["name"], sampling, m) for m in theirs]
        lines.append(f"| {' | '.join(cells)} |")
    return "\n".join(lines)


def markdown(results: dict) -> str:
    """The whole report: the best-k summary, then one detail table per prompt and sampling."""
    env, settings = results["environment"], results["settings"]
    out = [
        (
            f"Target {settings['model']} on {hardware(env)} ({env['dtype']}), {settings['max_new_tokens']} new "
            f"tokens, median of {settings['repeats']} after {settings['warmup']} warm-up; torch {env['torch']}, "
            f"transformers {env['transformers']}, commit {env['commit'] or 'unknown'}, {env['date']}."
        ),
        f"`{env['command']}`" + "".join(f" {k}={v}" for k, v in env.get("switches", {}).items()),
        "",
        (
            "Speedup: decode tokens per second over plain decoding's, same engine, prompt and sampling, "
            "at each method's best k (transformers' columns: over its own plain decoding; the tables below "
            "give ours / theirs at each k)."
        ),
        "",
        summary_table(results),
    ]
    for note in results.get("notes", []):
        out += ["", note]
    for prompt, sampling in sections(results):
        sampled = results["settings"]["samplings"][sampling]
        heading = (
            f"### {prompt['title']}, {sampling} ({sampling_words(sampled)}; prompt {prompt['tokens']} tokens)"
        )
        out += [
            "",
            heading,
            "",
            prefill_line(results, prompt["name"], sampling),
            "",
            detail_table(results, prompt, sampling),
        ]
    return "\n".join(out) + "\n"


def compare_table(rows: list[dict], prompt_tokens: int) -> str:
    """One table: each method's best k marked, the fastest row of all starred."""
    best = {}
    for r in rows:
        if r["method"] != "plain" and (r["method"] not in best or r["tok_s"] > best[r["method"]]["tok_s"]):
            best[r["method"]] = r
    fastest = max(rows, key=lambda r: r["tok_s"])
    lines = [
        f"Prompt of {prompt_tokens} tokens, {rows[0]['new_tokens']} new tokens (plain decoding).",
        "",
        *table_head(OUR_COLUMNS + ["best"]),
    ]
    for r in rows:
        mark = "★ fastest" if r is fastest else ("best k" if best.get(r["method"]) is r else "")
        lines.append(f"| {' | '.join(our_cells(r) + [mark])} |")
    return "\n".join(lines)


def prefill_line(results: dict, prompt: str, sampling: str) -> str:
    """The prompt's reading times, which decode speed leaves out: the target's (plain rows) and
    the draft model's (slowest draft row), per engine."""
    parts = []
    for engine in (SPECCHAT, TRANSFORMERS):
        here = [
            r
            for r in results["rows"]
            if (r["engine"], r["prompt"], r["sampling"]) == (engine, prompt, sampling)
        ]
        plain = next((r for r in here if r["method"] == "plain"), None)
        if plain is None:
            continue
        text = f"{engine}: prefill {plain['prefill_ms']:.0f} ms"
        drafts = [
            r["draft_prefill_ms"]
            for r in here
            if r["method"].startswith("draft") and r.get("draft_prefill_ms")
        ]
        if drafts:
            text += f", draft model's {max(drafts):.0f} ms"
        parts.append(text)
    return "Off the decode clock: " + "; ".join(parts) + "."


def hardware(env: dict) -> str:
    threads = env.get("threads")
    if env["device"].startswith("cpu") and threads:
        return f"{env['hardware']}, {threads} thread{'s' if threads > 1 else ''}"
    return env["hardware"]


def sampling_words(s: dict) -> str:
    if s["temperature"] == 0:
        return "argmax"
    return f"temperature {s['temperature']}, top-p {s['top_p']}, top-k {s['top_k']}, seed {s['seed']}"


# ---- Chart ---------------------------------------------------------------------------------


def write_chart(results: dict, path: Path) -> str | None:
    """Speedup against k: a panel per prompt (columns) and sampling (rows), a colour per method,
    ours solid and transformers' dashed. Returns why not instead of raising when matplotlib is
    missing: the chart is optional."""
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        return "no chart: matplotlib is not installed (pip install matplotlib)"
    rows = results["rows"]
    prompts = list(dict.fromkeys(r["prompt"] for r in rows))
    modes = list(dict.fromkeys(r["sampling"] for r in rows))
    fig, axes = plt.subplots(
        len(modes), len(prompts), figsize=(5.5 * len(prompts), 3.8 * len(modes)), squeeze=False, sharey=True
    )
    palette = ("tab:blue", "tab:orange", "tab:green", "tab:red", "tab:purple", "tab:brown", "tab:pink")
    colours = {m: palette[i % len(palette)] for i, m in enumerate(method_order()[1:])}
    for i, sampling in enumerate(modes):
        for j, prompt in enumerate(prompts):
            ax = axes[i][j]
            here = [r for r in rows if r["prompt"] == prompt and r["sampling"] == sampling]
            plain = next(
                (r["tok_s"] for r in here if r["engine"] == SPECCHAT and r["method"] == "plain"), None
            )
            for engine, style in ((SPECCHAT, "-o"), (TRANSFORMERS, "--x")):
                for method in method_order()[1:]:
                    line = sorted(
                        (r for r in here if (r["engine"], r["method"]) == (engine, method) and r["k"] != AUTO),
                        key=lambda r: r["k"],
                    )
                    if line and plain:
                        ax.plot(
                            [r["k"] for r in line],
                            [r["tok_s"] / plain for r in line],
                            style,
                            color=colours[method],
                            label=line[0]["label"],
                        )
            theirs = next(
                (r["tok_s"] for r in here if r["engine"] == TRANSFORMERS and r["method"] == "plain"), None
            )
            if theirs and plain:
                ax.axhline(
                    theirs / plain, color="grey", linestyle="--", linewidth=0.8, label="transformers plain"
                )
            ax.axhline(1.0, color="grey", linewidth=0.8, label="plain")
            ax.set_xticks([k for k in results["settings"]["ks"] if k != AUTO])  # auto has no place on the axis
            ax.set_title(f"{prompt}, {sampling}")
            ax.set_xlabel("k (drafts per step)")
            ax.grid(alpha=0.3)
        axes[i][0].set_ylabel("tok/s over our plain decoding")
    axes[0][-1].legend(fontsize=7)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return None
