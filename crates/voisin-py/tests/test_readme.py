"""Every Python example of the README runs as written, and without a warning a user would see."""

import contextlib
import io
import os
import re
import warnings

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(
    __file__)))))


def examples():
    with open(os.path.join(ROOT, "README.md"), encoding="utf-8") as f:
        text = f.read()
    blocks = re.findall(r"^```python\n(.*?)^```", text, flags=re.M | re.S)
    assert blocks, "the README has no Python example"
    return blocks


@pytest.mark.parametrize("code", examples(), ids=lambda code: code.splitlines()[0][:40])
def test_readme_example_runs_without_warnings(code, tmp_path, monkeypatch):
    # files an example writes (an index file) land in a folder of the test's own
    monkeypatch.chdir(tmp_path)
    out = io.StringIO()
    with warnings.catch_warnings(record=True) as seen, contextlib.redirect_stdout(out):
        # Python's default filters, as a user's script (__main__) meets them
        warnings.resetwarnings()
        warnings.simplefilter("default")
        for quiet in (DeprecationWarning, PendingDeprecationWarning, ImportWarning,
                      ResourceWarning):
            warnings.filterwarnings("ignore", category=quiet)
        warnings.filterwarnings("default", category=DeprecationWarning, module="__main__")
        exec(compile(code, "README.md", "exec"), {"__name__": "__main__"})
    assert not seen, [f"{w.category.__name__}: {w.message}" for w in seen]
    # a printed value is the one the comment after it shows
    printed = out.getvalue().splitlines()
    shown = [line[2:] for line in code.splitlines() if line.startswith("# [") or
             line.startswith("# (")]
    assert printed[:len(shown)] == shown
