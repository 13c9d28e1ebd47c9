"""``write`` steps: a model through the ``llm`` library, or the offline writer.

The offline writer is deterministic and says what it is, so a run without a
model still produces a readable briefing, and a test can predict it.
"""

from __future__ import annotations

import json
from typing import Any

from ..errors import ModelError

_TEXT_KEYS = ("summary", "subject", "text", "title", "name", "snippet", "label")


def _lines(value: Any, limit: int = 6) -> list[str]:
    if isinstance(value, dict):
        for key in ("events", "messages", "items", "results", "result"):
            if isinstance(value.get(key), list):
                return _lines(value[key], limit)
        text = next((str(value[k]) for k in _TEXT_KEYS if value.get(k)), None)
        return [text] if text else [json.dumps(value, ensure_ascii=False, sort_keys=True)[:160]]
    if isinstance(value, list):
        out = []
        for item in value[:limit]:
            out.extend(_lines(item, 1)[:1])
        if len(value) > limit:
            out.append(f"... and {len(value) - limit} more")
        return out
    return [str(value)[:400]]


def offline(prompt: str, inputs: dict[str, Any], missing: list[str]) -> str:
    parts = [f"{prompt[:1].upper()}{prompt[1:]} (offline writer: no model configured)"]
    for name, value in inputs.items():
        parts.append(f"\n{name}:")
        parts.extend(f"  - {line}" for line in _lines(value))
    if missing:
        parts.append(f"\nmissing: {', '.join(missing)} (dropped by a quorum or failed)")
    return "\n".join(parts)


def with_model(model_id: str, prompt: str, inputs: dict[str, Any], missing: list[str]) -> str:
    """Blocking: call from a worker thread."""
    try:
        import llm  # optional, and slow to import: only when a run asks for a model
    except ImportError:
        raise ModelError(
            f"model {model_id!r} needs the llm library",
            hint="install vodou_engine[llm], or run without a model to use the offline writer",
            model=model_id,
        ) from None
    body = [f"Task: {prompt}", "", "Inputs (JSON):"]
    for name, value in inputs.items():
        body.append(f"## {name}\n{json.dumps(value, ensure_ascii=False, sort_keys=True, default=str)}")
    if missing:
        body.append(f"\nThese inputs are missing (a quorum dropped them or they failed): {', '.join(missing)}")
    try:
        model = llm.get_model(model_id)
    except llm.UnknownModelError as exc:
        raise ModelError(
            f"unknown model {model_id!r}: {exc}", hint="`llm models` lists the models installed", model=model_id
        ) from None
    try:
        return model.prompt("\n".join(body)).text()
    except Exception as exc:  # noqa: BLE001 - a missing key, a refused or failed request: the step fails, the run does not crash
        raise ModelError(
            f"model {model_id!r} could not write: {type(exc).__name__}: {exc}",
            hint="check the model's key and settings (`llm keys`, `llm models`)",
            model=model_id,
        ) from None
