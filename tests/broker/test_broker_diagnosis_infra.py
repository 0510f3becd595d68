"""Failures of the node, the network or a service are not the job's code: they resume in one click, and the advice is
not "fix the error in the code"; the step the diagnosis names is read from the common progress formats."""

import pytest

from broker.diagnosis import INFRASTRUCTURE, Ending, diagnose, last_step

WATCHDOG = ("step 3000 loss 2.1\n"
            "[E ProcessGroupNCCL.cpp:616] [Rank 0] Watchdog caught collective operation timeout: WorkNCCL(SeqNum=12, "
            "OpType=ALLREDUCE, NumelIn=1, NumelOut=1, Timeout(ms)=600000) ran for 600081 milliseconds before timing "
            "out.\n"
            "Traceback (most recent call last):\n"
            "  File \"train.py\", line 10, in <module>\n"
            "    dist.all_reduce(t)\n"
            "RuntimeError: NCCL communicator was aborted on rank 0.\n")

INFRA_LOGS = [
    ("a NCCL watchdog timeout, then the communicator aborted", WATCHDOG, "nccl_network"),
    ("a peer's store connection reset", "Traceback (most recent call last):\n  File \"train.py\", line 3, in <module>\n"
     "torch.distributed.DistNetworkError: Connection reset by peer\n", "nccl_network"),
    ("the client socket timed out connecting to the master",
     "torch.distributed.DistNetworkError: The client socket has timed out after 900s while trying to connect to "
     "(10.0.0.2, 29500).\n", "nccl_network"),
    ("a node never joined the store",
     "Traceback (most recent call last):\n  File \"train.py\", line 3, in <module>\n"
     "torch.distributed.DistStoreError: Timed out after 901 seconds waiting for clients. 1/2 clients joined.\n",
     "nccl_network"),
    ("a rendezvous timed out",
     "torch.distributed.elastic.rendezvous.api.RendezvousTimeoutError\n", "nccl_network"),
    ("the NCCL unique id could not be fetched from the store",
     "RuntimeError: [1] is setting up NCCL communicator and retrieving ncclUniqueId from [0] via c10d key-value store "
     "by key '0', but store->get('0') got error: Connection reset by peer\n", "nccl_network"),
    ("no GPU on the node", "Traceback (most recent call last):\n  File \"train.py\", line 3, in <module>\n"
     "RuntimeError: No CUDA GPUs are available\n", "gpu_unavailable"),
    ("the GPUs not yet initialized",
     "UserWarning: CUDA initialization: Unexpected error from cudaGetDeviceCount(). Did you run some cuda functions "
     "before calling NumCudaDevices() that might have already set the error? Error 802: system not yet initialized "
     "(Triggered internally at ../c10/cuda/CUDAFunctions.cpp:108.)\n", "gpu_unavailable"),
    ("the hub answered 503", "step 0\nrequests.exceptions.HTTPError: 503 Server Error: Service Unavailable for url: "
     "https://huggingface.co/meta-llama/x/resolve/main/config.json\n", "network_error"),
    ("a connection refused", "requests.exceptions.ConnectionError: HTTPSConnectionPool(host='huggingface.co', "
     "port=443): Max retries exceeded with url: /x (Caused by NewConnectionError('<urllib3.connection."
     "HTTPSConnection object at 0x7f>: Failed to establish a new connection: [Errno 111] Connection refused'))\n",
     "network_error"),
    ("S3 throttled the reads", "botocore.exceptions.ClientError: An error occurred (SlowDown) when calling the "
     "GetObject operation (reached max retries: 4): Please reduce your request rate.\n", "network_error"),
]


@pytest.mark.parametrize("log_tail, cls", [c[1:] for c in INFRA_LOGS], ids=[c[0] for c in INFRA_LOGS])
def test_a_failure_of_the_node_or_the_network_resumes_without_force(log_tail, cls):
    d = diagnose(Ending(phase="failed", exit_code=1, command="run", log_tail=log_tail))
    assert (d.cls, d.infrastructure) == (cls, True), d
    assert d.cls in INFRASTRUCTURE
    assert "Fix the error in the code" not in d.text and "resume it" in d.hint


def test_the_nccl_watchdog_names_the_cause_and_the_step():
    d = diagnose(Ending(phase="failed", exit_code=1, command="run", log_tail=WATCHDOG))
    assert d.sentence == "A NCCL/network error stopped the job after step 3000 (the last in the job's log)."


def test_setup_whose_package_index_could_not_be_resolved_is_the_network():
    log = ("WARNING: Retrying (Retry(total=4, connect=None, read=None, redirect=None, status=None)) after connection "
           "broken by 'NewConnectionError('<pip._vendor.urllib3.connection.HTTPSConnection object at 0x7f>: Failed to "
           "establish a new connection: [Errno -3] Temporary failure in name resolution')': /simple/torch/\n"
           "ERROR: Could not find a version that satisfies the requirement torch==2.3.0 (from versions: none)\n"
           "ERROR: No matching distribution found for torch==2.3.0\n")
    d = diagnose(Ending(phase="failed", exit_code=1, command="setup", log_tail=log))
    assert (d.cls, d.infrastructure) == ("network_error", True), d
    assert d.sentence.startswith('A server or the network failed: "WARNING: Retrying')


@pytest.mark.parametrize("log_tail", [
    "requests.exceptions.HTTPError: 404 Client Error: Not Found for url: https://huggingface.co/no/such/config.json\n",
    "ERROR: Could not find a version that satisfies the requirement torchh==2.3.0 (from versions: none)\n"
    "ERROR: No matching distribution found for torchh==2.3.0\n",
    "requests.exceptions.HTTPError: 401 Client Error: Unauthorized for url: https://huggingface.co/x\n",
], ids=["a 404", "a package that does not exist", "a 401"])
def test_a_missing_file_or_package_or_refused_credentials_stay_the_jobs(log_tail):
    d = diagnose(Ending(phase="failed", exit_code=1, command="run", log_tail=log_tail))
    assert not d.infrastructure and d.cls not in INFRASTRUCTURE, d


@pytest.mark.parametrize("ended", ["preempted", "stopped (the job is at its budget)"],
                         ids=["after a preemption notice", "after the broker's stop notice (a budget stop)"])
def test_a_preemption_the_checkpoint_library_handled_is_not_a_code_error_whatever_the_wrapper_exits(ended):
    log = ("step 800 loss 1.1\n"
           f"WARNING:checkpoint.checkpointer:{ended}: checkpoint step-800 committed, exiting\n")
    d = diagnose(Ending(phase="failed", exit_code=124, command="run", log_tail=log))  # `timeout -s TERM` exits 124
    assert (d.cls, d.infrastructure) == ("terminated", True), d
    assert d.sentence == ("The job was stopped by a notice (a preemption or SIGTERM) after step 800 (the last in the job's log) and exited after "
                          "committing its checkpoint step-800; it exited with code 124.")
    assert "Fix the error" not in d.text


@pytest.mark.parametrize("log_tail, step", [
    (" 40%|████      | 1200/3000 [10:00<15:00,  2.00it/s]", 1200),  # HF Trainer
    ("Epoch 0:  40%|████      | 1200/3000 [10:00<15:00, v_num=0, train_loss=1.2]", 1200),  # Lightning
    ("global_step=1200 loss=1.2", 1200),
    ("{'loss': 1.2, 'grad_norm': 0.5, 'epoch': 0.3, 'step': 1200}", 1200),
    ('{"step": 1200, "loss": 1.2}', 1200),
    ("iteration 1200 | loss 1.2", 1200),
    (" iteration     1200/  500000 | consumed samples: 76800", 1200),  # Megatron
    ("iter 1200: loss 2.1, time 80ms", 1200),  # nanoGPT
    ("step 1200 loss 2.1\n 12%|#2        | 120/1000 [01:02<07:35,  1.93it/s]\r 13%|#3        | 130/1000 [01:03<", 130),
    ("step 7\nFetching 4 files: 100%|██████████| 4/4 [00:00<00:00, 12.3it/s]", 7),
    ("step 7\nLoading checkpoint shards: 100%|██████████| 2/2 [00:03<00:00,  1.60s/it]", 7),
    ("Step 2/7 : RUN pip install -r requirements.txt", None),  # Docker's build step
    ("step 40\nStep 3/7 : COPY . /app", 40),
    ("[step 1200/5000] loss=1.2", 1200),
])
def test_the_step_is_read_from_the_common_progress_formats(log_tail, step):
    assert last_step(log_tail) == step


def test_the_diagnosis_names_a_progress_bars_step():
    log = ("{'loss': 1.2, 'learning_rate': 5e-05, 'epoch': 0.3}\n"
           " 40%|████      | 1200/3000 [10:00<15:00,  2.00it/s]\n"
           "Traceback (most recent call last):\n"
           "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB.\n")
    assert diagnose(Ending("failed", 1, log_tail=log)).sentence == "Out of GPU memory after step 1200 (the last in the job's log)."
    setup = "Step 2/7 : RUN pip install -r requirements.txt\nERROR: failed to build\n"
    assert diagnose(Ending("failed", 1, log_tail=setup, command="setup")).step is None
