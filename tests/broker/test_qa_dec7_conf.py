"""A QA tester's config-file walk (Dec 7): what `broker serve --config FILE` took at start and then ran as something
else — a `pools:` whose entries were all commented out (the built-in `local` pool at $0.20/h), a pool's accelerator
written with its count (`A10G:8`, every GPU job refused), or left out of a pool of GPUs (a CPU pool), two pools whose
names differ only in case (a job quoted at one's price ran on the other) — and what it refused without saying what
was wrong (a price written with its unit) or took for ever (a pool of 100,000,000 GPUs)."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

import pytest
from broker_testing import ADMIN

from broker.config import ConfigError

REPO = Path(__file__).parents[2]
PORT = "18851"  # never bound: each start here is refused before it listens
GPU_POOL = "{name: dgx, gpus: 4, accelerator: A100, price_per_gpu_hour: '0.5'}"


def refused(make_settings, config: str) -> str:
    with pytest.raises(ConfigError) as caught:
        make_settings(config=config)
    return str(caught.value)


def serve(tmp_path: Path, config: str) -> subprocess.CompletedProcess:
    """`broker serve --config FILE`, as the tester ran it; refused, it answers at once."""
    path = tmp_path / "broker.yaml"
    path.write_text(config)
    env = {"PATH": os.environ.get("PATH", "/usr/bin:/bin"), "HOME": str(tmp_path), "BROKER_ADMIN_TOKEN": ADMIN,
           "BROKER_DATA_DIR": str(tmp_path / "data")}
    return subprocess.run([sys.executable, "-m", "broker.cli", "serve", "--port", PORT, "--config", str(path)],
                          env=env, cwd=REPO, capture_output=True, text=True, timeout=30)


# -- 1. a section given as YAML's null --------------------------------------------------------------------------------

@pytest.mark.parametrize("config, said", [
    pytest.param("pools:\n#  - {name: dgx, slots: 8, accelerator: A100, price_per_slot_hour: '1.10'}\n",
                 "pools: is empty (null): list the pools, or write [] for none",
                 id="a pools section whose every entry is commented out is refused, not run as the local pool"),
    pytest.param("pools: ~\n", "pools: is empty (null): list the pools, or write [] for none",
                 id="pools given as null is refused"),
    pytest.param("clouds:\n#  - gcp\n", "clouds: is empty (null): list the clouds to price, or write [] for none",
                 id="a clouds section emptied by comments is refused, not read as every cloud"),
    pytest.param("teams:\n#  vision: {tokens: [...]}\n", "teams: is empty (null): list the teams, or write {} for none",
                 id="a teams section emptied by comments is refused as an emptied file is"),
    pytest.param("zones:\n#  - {name: z}\n", "zones: is empty (null): list the zones, or write [] for none",
                 id="a zones section emptied by comments is refused"),
    pytest.param("admin_token_sha256:\n", "admin_token_sha256: is empty (null): list the digests, or write [] for none",
                 id="an admin digest list emptied by comments is refused"),
])
def test_a_section_given_as_null_is_refused_naming_it_not_read_as_its_default(make_settings, config, said):
    assert refused(make_settings, config) == said


def test_an_empty_list_is_still_none_and_a_section_left_out_its_default(make_settings):
    assert make_settings(config="pools: []\nclouds: []\nzones: []\nteams: {}\n").pools == ()
    settings = make_settings(config="default_budget_usd: '5'\n")
    assert [p.name for p in settings.pools] == ["local"] and settings.clouds == ("aws", "gcp")


def test_broker_serve_refuses_a_commented_out_pools_section_in_one_line(tmp_path):
    r = serve(tmp_path, "pools:\n#  - {name: dgx, gpus: 8, accelerator: A100, price_per_gpu_hour: '1.10'}\n")
    assert r.returncode == 1 and r.stderr == (f"error: {tmp_path / 'broker.yaml'}: pools: is empty (null): list the "
                                              "pools, or write [] for none\n"), r.stderr


# -- 2. a pool's accelerator ------------------------------------------------------------------------------------------

@pytest.mark.parametrize("pool, said", [
    pytest.param("{name: dgx, gpus: 8, accelerator: 'A10G:8', price_per_gpu_hour: '1'}",
                 "pools[0].accelerator: 'A10G:8' is a name, not a count: write accelerator: A10G and gpus: 8",
                 id="an accelerator written with its count is refused, saying how to write both"),
    pytest.param("{name: dgx, gpus: 4, price_per_gpu_hour: '0.5'}",
                 "pools[0].accelerator: is not given, but the pool has gpus and price_per_gpu_hour: name its GPU "
                 "(accelerator: A100), or write slots and price_per_slot_hour for a CPU pool",
                 id="a pool of gpus with no accelerator is refused, not read as a CPU pool"),
    pytest.param("{name: dgx, slots: 4, price_per_gpu_hour: '0.5'}",
                 "pools[0].accelerator: is not given, but the pool has price_per_gpu_hour: name its GPU "
                 "(accelerator: A100), or write slots and price_per_slot_hour for a CPU pool",
                 id="a pool priced per GPU-hour with no accelerator is refused"),
    pytest.param("{name: dgx, slots: 4, accelerator: 100, price_per_slot_hour: '0.5'}",
                 "pools[0].accelerator: must be the GPU's name, like A100, not 100 (leave it out for a CPU pool)",
                 id="an accelerator that is a number is refused"),
    pytest.param("{name: dgx, slots: 4, accelerator: '', price_per_slot_hour: '0.5'}",
                 "pools[0].accelerator: must be the GPU's name, like A100, not '' (leave it out for a CPU pool)",
                 id="an empty accelerator is refused"),
])
def test_a_pool_accelerator_no_job_could_match_is_refused_at_start(make_settings, pool, said):
    assert refused(make_settings, f"pools:\n  - {pool}\n") == said


def test_a_pool_accelerator_written_as_a_name_is_taken(make_settings):
    (pool,) = make_settings(config=f"pools:\n  - {GPU_POOL}\n").pools
    assert (pool.accelerator, pool.slots, pool.price_per_slot_hour) == ("A100", 4, 500_000)
    (cpu,) = make_settings(config="pools: [{name: cpu, slots: 4, price_per_slot_hour: '0.05'}]\n").pools
    assert cpu.accelerator is None


def test_broker_serve_refuses_an_accelerator_with_a_count_in_one_line(tmp_path):
    r = serve(tmp_path, "pools: [{name: dgx, gpus: 8, accelerator: 'A10G:8', price_per_gpu_hour: '1'}]\n")
    assert r.returncode == 1 and r.stderr == (f"error: {tmp_path / 'broker.yaml'}: pools[0].accelerator: 'A10G:8' is a "
                                              "name, not a count: write accelerator: A10G and gpus: 8\n"), r.stderr


# -- 3. names equal ignoring case ---------------------------------------------------------------------------------------

@pytest.mark.parametrize("config, said", [
    pytest.param(f"pools:\n  - {GPU_POOL}\n  - {{name: DGX, slots: 2, price_per_slot_hour: '0.1'}}\n",
                 "pools[1].name: 'DGX' is also the name of pools[0] (as 'dgx', names are read ignoring case): each of "
                 "the pools needs a name of its own",
                 id="two pools whose names differ only in case are refused, as infra: local/DGX names either"),
    pytest.param("pools: []\nzones:\n  - {name: east, price_per_hour: '1'}\n  - {name: East, price_per_hour: '1'}\n",
                 "zones[1].name: 'East' is also the name of zones[0] (as 'east', names are read ignoring case): each "
                 "of the zones needs a name of its own",
                 id="two zones whose names differ only in case are refused"),
    pytest.param(f"pools:\n  - {GPU_POOL}\nzones:\n  - {{name: DGX, price_per_hour: '1'}}\n",
                 "zones[0].name: 'DGX' is also a pool's name (as 'dgx', names are read ignoring case): give the zone "
                 "another name",
                 id="a zone named as a pool but for case is refused"),
    pytest.param(f"pools:\n  - {GPU_POOL}\n  - {GPU_POOL}\n",
                 "pools[1].name: 'dgx' is also the name of pools[0]: each of the pools needs a name of its own",
                 id="an exact duplicate is refused as before"),
])
def test_names_equal_ignoring_case_are_refused_as_duplicates(make_settings, config, said):
    assert refused(make_settings, config) == said


# -- 4. a price that is not an amount ---------------------------------------------------------------------------------

@pytest.mark.parametrize("config, said", [
    pytest.param("pools: [{name: dgx, gpus: 4, accelerator: A100, price_per_gpu_hour: '$2.50/h'}]\n",
                 "pools[0].price_per_gpu_hour: '$2.50/h' is not an amount of dollars: write 2.50 (the price is per "
                 "GPU-hour)", id="a price written with its unit says the value and how to write it"),
    pytest.param("pools: [{name: dgx, gpus: 4, accelerator: A100, price_per_gpu_hour: '2.50 USD'}]\n",
                 "pools[0].price_per_gpu_hour: '2.50 USD' is not an amount of dollars: write 2.50 (the price is per "
                 "GPU-hour)", id="a price written with its currency says the value and how to write it"),
    pytest.param("pools: [{name: dgx, gpus: 4, accelerator: A100, price_per_gpu_hour: 2.50/h}]\n",
                 "pools[0].price_per_gpu_hour: '2.50/h' is not an amount of dollars: write 2.50 (the price is per "
                 "GPU-hour)", id="a price written per hour says the value and how to write it"),
    pytest.param("pools: [{name: cpu, slots: 4, price_per_slot_hour: cheap}]\n",
                 "pools[0].price_per_slot_hour: 'cheap' is not an amount of dollars: write digits with a point before "
                 "the cents, like 2.50 (the price is per slot-hour)", id="a price that is a word says so"),
    pytest.param("pools: [{name: dgx, gpus: 4, accelerator: A100, price_per_gpu_hour: 99999999999999}]\n",
                 "pools[0].price_per_gpu_hour: 99999999999999 is more than the most taken, $1,000,000,000.00",
                 id="a price too large says the most taken, not that it is no amount"),
    pytest.param("pools: []\nzones: [{name: z, price_per_hour: '$1.20/h'}]\n",
                 "zones[0].price_per_hour: '$1.20/h' is not an amount of dollars: write 1.20 (the price is per hour)",
                 id="a zone's price is said as a pool's is"),
    pytest.param("pools: []\nzones: [{name: z, price_per_hour: cheap}]\n",
                 "zones[0].price_per_hour: 'cheap' is not an amount of dollars: write digits with a point before the "
                 "cents, like 2.50 (the price is per hour)", id="a zone's price that is a word says so"),
    pytest.param("pools: []\ndefault_budget_usd: '200 USD'\n",
                 "default_budget_usd: '200 USD' is not an amount of dollars: write 200 (in US dollars)",
                 id="a default budget written with its currency says the value and how to write it"),
    pytest.param("pools: []\nteams: {vision: {monthly_budget_usd: 99999999999999}}\n",
                 "teams.vision.monthly_budget_usd: 99999999999999 is more than the most taken, $1,000,000,000.00",
                 id="a team's monthly budget too large says the most taken"),
])
def test_a_price_that_is_no_amount_says_the_value_and_the_fix(make_settings, config, said):
    assert refused(make_settings, config) == said


# -- 5. a pool's size ---------------------------------------------------------------------------------------------------

@pytest.mark.parametrize("size", [4097, 1_000_000, 100_000_000])
def test_a_pool_larger_than_any_real_one_is_refused_at_once(make_settings, size):
    """Every size of a pool is an offer, made at start and at each tick: 100,000,000 GPUs hung the start."""
    start = time.monotonic()
    said = refused(make_settings, f"pools: [{{name: dgx, gpus: {size}, accelerator: A100, price_per_gpu_hour: '1'}}]\n")
    assert said == (f"pools[0].gpus: is {size:,}, more than the 4,096 a pool takes at most: give the pool's real size, "
                    "or split a larger cluster into pools of 4,096")
    assert time.monotonic() - start < 5


def test_a_pool_of_the_largest_size_is_taken(make_settings):
    (pool,) = make_settings(config="pools: [{name: cpu, slots: 4096, price_per_slot_hour: '0.01'}]\n").pools
    assert pool.slots == 4096


def test_broker_serve_refuses_a_pool_of_a_hundred_million_gpus_in_one_line_at_once(tmp_path):
    r = serve(tmp_path, "pools: [{name: dgx, gpus: 100000000, accelerator: A100, price_per_gpu_hour: '1'}]\n")
    assert r.returncode == 1 and r.stderr == (f"error: {tmp_path / 'broker.yaml'}: pools[0].gpus: is 100,000,000, more "
                                              "than the 4,096 a pool takes at most: give the pool's real size, or "
                                              "split a larger cluster into pools of 4,096\n"), r.stderr
