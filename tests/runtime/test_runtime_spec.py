"""Job specs: the shipped examples validate; every kind of bad spec gets an error naming the file,
the line and the field, and `dlsched submit` exits non-zero without contacting any server."""
from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from dlsched.core.errors import InputError
from dlsched.runtime.spec import load_job_spec

EXAMPLES = Path(__file__).resolve().parents[2] / "examples"


def test_examples_validate():
    a = load_job_spec(EXAMPLES / "allreduce.yaml")
    assert a.workers == 2 and a.ps == 0 and a.epochs == 6 and Path(a.entry).is_file()
    p = load_job_spec(EXAMPLES / "ps.yaml")
    assert p.ps == 1 and p.iterations == 150
    js = p.to_jobspec("j1", 5.0)
    assert js.comm == "ps" and js.num_workers == 2 and js.num_ps == 1 and js.gpus == 2.0
    assert js.user == "default"


BAD = [
    ("name: x\nentry: {prog}\nworkers: 2\nbatch_size: 64\niterations: 10\nbogus: 1\n", 6, "bogus", "unknown field"),
    ("name: x\nentry: {prog}\nworkers: two\nbatch_size: 64\niterations: 10\n", 3, "workers", "must be an integer"),
    ("name: x\nentry: {prog}\nworkers: 0\nbatch_size: 64\niterations: 10\n", 3, "workers", ">= 1"),
    ("name: x\nentry: {prog}\nbatch_size: 64\n", None, "epochs", "exactly one of iterations and epochs"),
    ("name: x\nentry: {prog}\nbatch_size: 64\niterations: 5\nepochs: 2\n", 4, "iterations", "exactly one"),
    ("name: x\nentry: missing.py\nbatch_size: 64\niterations: 5\n", 2, "entry", "no such program file"),
    ("name: x\nentry: {prog}\niterations: 5\n", None, "batch_size", "is required"),
    ("name: x\nentry: {prog}\nworkers: 3\nbatch_size: 64\niterations: 5\n", 4, "batch_size", "divisible by workers"),
    ("name: x\nentry: {prog}\nbatch_size: 64\niterations: 5\ngpus_per_worker: 1.5\n", 5, "gpus_per_worker", "fraction"),
    ("name: 'bad name!'\nentry: {prog}\nbatch_size: 64\niterations: 5\n", 1, "name", "letters"),
    ("name: x\nentry: {prog}\nbatch_size: 64\niterations: 5\nargs: [1, 2]\n", 5, "args", "mapping"),
    ("name: x\nentry: {prog}\nbatch_size: 64\niterations: 5\nuser: 'a b'\n", 5, "user", "letters"),
    ("name: x\nentry: {prog}\nbatch_size: 64\niterations: 5\nmodel: " + "m" * 200 + "\n", 5, "model", "at most 128"),
]


@pytest.mark.parametrize("text,line,field,msg", BAD)
def test_bad_specs_name_file_line_field(tmp_path, text, line, field, msg):
    p = tmp_path / "job.yaml"
    p.write_text(text.format(prog=EXAMPLES / "allreduce_digits.py"))
    with pytest.raises(InputError) as ei:
        load_job_spec(p)
    e = ei.value
    assert e.file == str(p) and e.field == field and msg in str(e)
    assert e.line == line
    if line:
        assert f"line {line}" in str(e)


def test_not_yaml_and_not_a_mapping(tmp_path):
    p = tmp_path / "broken.yaml"
    p.write_text("name: x\nentry: [unclosed\n")
    with pytest.raises(InputError, match=r"broken.yaml, line \d+: not valid YAML"):
        load_job_spec(p)
    p.write_text("- just\n- a list\n")
    with pytest.raises(InputError, match="must be a mapping"):
        load_job_spec(p)
    with pytest.raises(InputError, match="not found"):
        load_job_spec(tmp_path / "nope.yaml")


def test_cli_submit_bad_spec_exits_nonzero(tmp_path):
    p = tmp_path / "job.yaml"
    p.write_text("name: x\nentry: prog.py\nworkers: -1\nbatch_size: 64\niterations: 5\n")
    r = subprocess.run([sys.executable, "-m", "dlsched.cli.main", "submit", str(p)], capture_output=True,
                       text=True, env={"DLSCHED_STATE_DIR": str(tmp_path / "state"), "PATH": "/usr/bin:/bin"})
    assert r.returncode == 2
    assert f"{p}, line 3, field 'workers'" in r.stderr
    assert not (tmp_path / "state").exists()      # nothing written, no server contacted


def test_the_whole_schedlog_is_read_page_by_page(tmp_path):
    # the report and the calibration read every record, however long the run (no silent cap)
    from dlsched.runtime.store import Store
    from dlsched.scheduler.eventlog import LogRecord
    st = Store(tmp_path / "s.db")
    try:
        for i in range(7):
            st.log_record(LogRecord(float(i), "arrival", f"j{i}", ""))
        assert [r["job_id"] for r in st.schedlog_all(page=3)] == [f"j{i}" for i in range(7)]
        assert len(st.schedlog(limit=3)) == 3
    finally:
        st.close()
