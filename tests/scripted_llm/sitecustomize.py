"""A scripted `llm` model, ``scripted-web``, for a `recipe serve` process under test.

On the serve process's ``PYTHONPATH`` only (tests/test_browser_authoring.py puts it there),
and only when ``VODOU_TEST_LLM_SCRIPT`` names a JSON file: a list of replies, given in
order, one per prompt. No network, no key. Every prompt is appended to the file named by
``VODOU_TEST_LLM_PROMPTS``, so a test can read what the model was asked.
"""

import json
import os

if os.environ.get("VODOU_TEST_LLM_SCRIPT"):
    import llm

    class Scripted(llm.Model):
        model_id = "scripted-web"
        can_stream = False

        def __init__(self) -> None:
            with open(os.environ["VODOU_TEST_LLM_SCRIPT"], encoding="utf-8") as f:
                self.replies = list(json.load(f))

        def execute(self, prompt, stream, response, conversation=None):
            log = os.environ.get("VODOU_TEST_LLM_PROMPTS")
            if log:
                with open(log, "a", encoding="utf-8") as f:
                    f.write(json.dumps(prompt.prompt) + "\n")
            yield self.replies.pop(0) if self.replies else "(the script ran out)"

    class _Plugin:
        @llm.hookimpl
        def register_models(self, register):
            register(Scripted())

    llm.pm.register(_Plugin(), name="scripted-web")
