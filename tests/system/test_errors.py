"""Every error a user can act on is a KdiagError carrying its exit code, so the command line has one handler."""

import socket

import pytest

from kdiag.cli.main import main

from kdiag.analysis.catalog import CatalogError, RuleError
from kdiag.analysis.statefile import StateDirBusy, StateDirError
from kdiag.config.settings import ConfigError
from kdiag.core.archive import RecordingError
from kdiag.core.errors import KdiagError
from kdiag.core.outfile import OutputError
from kdiag.core.worker_process import WorkerError
from kdiag.core.yamlsafe import YamlError
from kdiag.serve.webserver import ListenError
from kdiag.tools.lab.jars import LabError
from tests.paths import RECORDINGS


@pytest.mark.parametrize(("error", "exit_code"), [
    (ConfigError("interval: must be a duration"), 2),
    (StateDirError("state_dir: not writable"), 2),
    (OutputError("out.json: a symlink"), 2),
    (YamlError("kdiag.yaml", "duplicate key", 3, 1), 2),
    (RecordingError("rec.tar.gz: not a recording"), 1),
    (RecordingError("rec.tar.gz: no such file", 2), 2),
    (CatalogError([RuleError("rules.yaml", 0, 0, "", "no id")]), 1),
    (StateDirBusy("another kdiag holds /var/lib/kdiag"), 1),
    (ListenError("cannot listen on 127.0.0.1:9000"), 1),
    (LabError("no lab in /tmp/lab"), 1),
    (LabError("--jvm-opts: bad", 2), 2),
    (WorkerError("the child died from SIGKILL"), 1),
])
def test_user_errors_are_kdiag_errors_with_their_exit_code(error, exit_code):
    assert isinstance(error, KdiagError)
    assert error.exit_code == exit_code


def test_a_catalog_error_reports_its_count_then_each_problem():
    error = CatalogError([RuleError("a.yaml", 0, 0, "", "no id"), RuleError("b.yaml", 2, 5, "x", "bad CEL")])
    assert error.report().splitlines() == ["the rule catalog has 2 error(s):", "a.yaml: no id",
                                           "b.yaml:2:5: rule 'x': bad CEL"]


@pytest.mark.integration
def test_run_on_a_taken_port_is_reported_by_the_one_handler(capsys):
    recording = RECORDINGS / "foreign-io-scanner"
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        assert main(["run", "--from", str(recording), "--listen", f"127.0.0.1:{port}"]) == 1
    assert capsys.readouterr().err == f"kdiag: cannot listen on 127.0.0.1:{port}: Address already in use\n"
