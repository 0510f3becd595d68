"""A report goes to another broker serving on the same data dir when the job's own broker does not answer.

QA walkthrough (Dec 8): of two brokers sharing a store, the one that had launched a job was killed; the job's steps
and commits went on to its dead port ("not yet told to the broker: Connection refused"), the survivor showed step 10
of a run at step 160, and with a heartbeat timeout stopped the healthy run as stalled. A launch now gives the job the
other brokers serving on its data dir (``BROKER_PROGRESS_URLS``); the library tries them when its own does not answer.
Real HTTP servers on loopback ports.
"""

from __future__ import annotations

import time

import pytest

from checkpoint import progress
from checkpoint.progress import Reporter
from test_progress_undelivered import Broker
from testports import free_port


@pytest.fixture(autouse=True)
def _fresh():
    progress._held.clear()
    progress._routes.clear()
    yield
    progress._held.clear()
    progress._routes.clear()


@pytest.fixture
def brokers():
    own, other = Broker(free_port()), Broker(free_port()).start()
    yield own, other
    own.stop()
    other.stop()


def test_a_commit_goes_to_the_other_broker_when_its_own_is_gone_and_later_reports_go_there_first(brokers, capsys):
    own, other = brokers  # its own broker is not listening
    env = {"BROKER_PROGRESS_URL": own.url, "BROKER_PROGRESS_URLS": other.url, "BROKER_JOB_TOKEN": "tok",
           "BROKER_ATTEMPT": "1", "BROKER_PROGRESS_INTERVAL_S": "0"}
    reporter = Reporter.from_env(env)
    assert reporter.report_checkpoint(100, "file:///ckpt/j1/step-100", wait=True) is True
    assert other.checkpoints() == [100]
    assert "not yet told to the broker" not in capsys.readouterr().err  # it was told
    own.start()  # its own broker back: the one that answered is still asked first
    assert Reporter.from_env(env).report_checkpoint(200, "file:///ckpt/j1/step-200", wait=True) is True
    assert other.checkpoints() == [100, 200] and own.bodies == []


def test_with_no_other_broker_answering_the_commit_is_kept_and_said_with_its_own_brokers_reason(brokers, capsys):
    own, other = brokers
    other.stop()
    reporter = Reporter(own.url, "tok", interval_s=0, attempt=1, fallbacks=[other.url])
    assert reporter.report_checkpoint(100, "file:///ckpt/j1/step-100", wait=True) is False
    assert "(not yet told to the broker: [Errno 111] Connection refused)" in capsys.readouterr().err
    own.start()
    reporter.report(101)  # the next report sends the held commit first, to whichever answers
    for _ in range(200):
        if own.checkpoints():
            break
        time.sleep(0.02)
    assert own.checkpoints() == [100]


def test_a_refusal_by_its_own_broker_is_not_sent_to_another(brokers):
    own, other = brokers
    own.status = 409
    own.start()
    assert Reporter(own.url, "tok", interval_s=0, fallbacks=[other.url]).report_checkpoint(
        5, "file:///c/5", wait=True) is False
    assert other.bodies == []  # the broker answered: another would answer the same
