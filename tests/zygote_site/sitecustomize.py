"""In a process the tests start: route demo servers through the test zygote (tests/demo_zygote.py).

Loaded because the suite puts this directory on ``PYTHONPATH``; it waits for
``vodou_engine.tools.process`` to be imported (most processes never do) and
patches its ``start`` then, so nothing is imported early.
"""

import os
import sys

if os.environ.get("DEMO_ZYGOTE"):

    class _PatchProcessStart:
        """A meta path finder that only watches for one module."""

        @classmethod
        def find_spec(cls, name, path=None, target=None):
            if name != "vodou_engine.tools.process":
                return None
            sys.meta_path.remove(cls)
            for finder in sys.meta_path:
                spec = finder.find_spec(name, path, target) if hasattr(finder, "find_spec") else None
                if spec is not None:
                    break
            else:
                return None
            loader = spec.loader
            original = loader.exec_module

            def exec_module(module):
                original(module)
                sys.path.insert(0, os.path.dirname(os.path.dirname(__file__)))
                try:
                    import demo_zygote
                finally:
                    sys.path.pop(0)
                demo_zygote.patch(module)

            loader.exec_module = exec_module
            return spec

    sys.meta_path.insert(0, _PatchProcessStart)
