"""The `keystone` command on wrong input: one clear line (and details), exit 1, no traceback.
These fail before any I/O, so they need no stack."""

import os
import subprocess
import sys
from pathlib import Path

KEYSTONE = str(Path(sys.executable).parent / "keystone")


def keystone(*args: str, stdin: str = "") -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("KEYSTONE_")}
    return subprocess.run(
        [KEYSTONE, *args],
        input=stdin,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
        env=env,
    )


def test_an_invalid_spec_names_fields_and_keeps_brackets_literal() -> None:
    result = keystone("stream", "create", "-f", "-", stdin="name: Bad\nowner: Team A\n")
    assert result.returncode == 1
    assert result.stderr.startswith("error: the stream spec is not valid\n")
    assert "'^[a-z][a-z0-9_-]{1,62}$'" in result.stderr  # not eaten as markup
    assert '"field": "name"' in result.stderr
    assert "Traceback" not in result.stderr


def test_a_filter_that_does_not_parse_is_refused_before_anything_is_created() -> None:
    spec = (
        "name: playback\nowner: team-a\noutputs:\n  - name: search\n"
        '    filter: "country = "\n    sink: {type: elasticsearch}\n'
    )
    result = keystone("stream", "create", "-f", "-", stdin=spec)
    assert result.returncode == 1
    assert '"field": "outputs.0.filter"' in result.stderr and '"column": 11' in result.stderr


def test_unreadable_files_and_bad_names_are_plain_errors() -> None:
    missing = keystone("stream", "create", "-f", "/no/such/spec.yaml")
    flat = " ".join(missing.stderr.replace("│", " ").split())  # typer boxes and wraps usage errors
    assert missing.returncode == 2 and "'/no/such/spec.yaml': No such file or directory" in flat
    assert "Traceback" not in missing.stderr
    bad_app = keystone("app", "create", "Bad App")
    assert bad_app.returncode == 1 and bad_app.stderr.startswith("error: app name 'Bad App'")
    no_key = keystone("send", "playback", "-", stdin='{"a": 1}\n')
    assert no_key.returncode == 1 and "an app key is needed" in no_key.stderr
