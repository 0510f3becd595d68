"""``GlobalRNG`` saves the generators of the libraries the script imported, and imports none itself: a numpy-only
script's saves loaded torch (seconds, hundreds of MiB) because capturing the RNG state did ``import torch``."""

from __future__ import annotations

import json
import subprocess

from conftest import PYTHON, REPO

SCRIPT = """
import json, random, sys
{imports}
from checkpoint import Checkpointer, GlobalRNG
ckpt = Checkpointer(sys.argv[1], env={{}}, handle_sigterm=False, every_steps=1)
state = {{"rng": GlobalRNG(), "step": 0}}
restored = ckpt.restore(default=None, into=state)
loaded_after_restore = sorted(m for m in ("torch", "numpy") if m in sys.modules)
if restored is None:
    random.seed(7)
    {seed}
    ckpt.save(1, state, wait=True)
    saved = ckpt.restore(allow_pickle=True)["rng"]
    {late_import}
    draws = [random.random(), {draw}]
else:
    saved = restored["rng"]
    {late_import}
    draws = [random.random(), {draw}]
ckpt.close()
print(json.dumps({{"restored": restored is not None, "loaded_after_restore": loaded_after_restore,
                  "loaded_at_end": sorted(m for m in ("torch", "numpy") if m in sys.modules),
                  "saved_keys": sorted(saved), "draws": draws}}))
"""


def run(base, **parts) -> dict:
    code = SCRIPT.format(**{"imports": "", "seed": "", "late_import": "", "draw": "None", **parts})
    out = subprocess.run([PYTHON, "-c", code, str(base)], cwd=REPO, capture_output=True, text=True, timeout=300,
                         env={"PATH": "/usr/bin:/bin", "PYTHONPATH": str(REPO)})
    assert out.returncode == 0, out.stderr
    return json.loads(out.stdout.strip().splitlines()[-1])


def test_a_numpy_only_script_saves_and_restores_its_random_state_without_loading_torch(tmp_path):
    parts = {"imports": "import numpy as np", "seed": "np.random.seed(7)", "draw": "float(np.random.rand())"}
    first = run(tmp_path / "run", **parts)
    assert not first["restored"] and first["loaded_at_end"] == ["numpy"], first
    assert first["saved_keys"] == ["numpy", "python"]
    second = run(tmp_path / "run", **parts)
    assert second["restored"] and second["loaded_at_end"] == ["numpy"], second
    assert second["draws"] == first["draws"]  # both generators continue where the save left them


def test_a_plain_python_script_loads_neither_numpy_nor_torch(tmp_path):
    first = run(tmp_path / "run")
    assert first["loaded_at_end"] == [] and first["saved_keys"] == ["python"], first
    second = run(tmp_path / "run")
    assert second["restored"] and second["loaded_at_end"] == [] and second["draws"] == first["draws"], second


def test_a_script_that_imports_numpy_after_the_restore_still_gets_its_saved_state(tmp_path):
    """The run that saved used numpy; the resumed script imports it only after ``restore``: numpy's generator is set
    at the restore all the same (numpy imported for it), so the draws after the import continue the saved stream."""
    first = run(tmp_path / "run", imports="import numpy as np", seed="np.random.seed(7)",
                draw="float(np.random.rand())")
    second = run(tmp_path / "run", late_import="import numpy as np", draw="float(np.random.rand())")
    assert second["restored"] and second["loaded_after_restore"] == ["numpy"], second
    assert second["draws"] == first["draws"]


def test_a_torch_script_still_saves_and_restores_torchs_generator(tmp_path):
    parts = {"imports": "import torch", "seed": "torch.manual_seed(7)", "draw": "float(torch.rand(1))"}
    first = run(tmp_path / "run", **parts)
    assert "torch" in first["saved_keys"], first
    second = run(tmp_path / "run", **parts)
    assert second["restored"] and second["draws"] == first["draws"], second
