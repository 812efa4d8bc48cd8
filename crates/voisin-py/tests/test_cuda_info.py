"""voisin.cuda_info(): where the CUDA libraries were found (the nvidia-* wheels of this Python,
VOISIN_CUDA_LIBS, the system), the kernels built into the wheel, the kernel cache, and why a GPU
is not used. The search runs once per process, so variants run in a fresh interpreter."""

import glob
import json
import os
import subprocess
import sys

import numpy as np
import pytest

import voisin

KEYS = {"gpu", "reason", "driver", "cublas", "nvrtc", "devices", "prebuilt_kernels",
        "prebuilt_nvrtc", "kernel_cache", "searched", "notes"}


def info_in_a_new_process(**env):
    """cuda_info() of a fresh interpreter whose environment has `env` (None: unset)."""
    e = dict(os.environ)
    for k, v in env.items():
        if v is None:
            e.pop(k, None)
        else:
            e[k] = v
    code = "import json, voisin; print(json.dumps(voisin.cuda_info()))"
    out = subprocess.run([sys.executable, "-c", code], env=e, capture_output=True, text=True,
                         check=True)
    return json.loads(out.stdout)


def wheel_libs(pattern):
    """The files matching nvidia/*/lib/<pattern> under this interpreter's sys.path."""
    return [f for p in sys.path if p for f in glob.glob(os.path.join(p, "nvidia", "*", "lib",
                                                                      pattern))]


def test_cuda_info_says_what_it_found_and_why_no_gpu():
    info = voisin.cuda_info()
    assert set(info) == KEYS
    assert info["gpu"] == voisin.cuda_available()
    assert (info["reason"] is None) == info["gpu"]
    assert info["searched"], info
    for lib in ("driver", "cublas", "nvrtc"):
        if info[lib] is not None:
            assert set(info[lib]) == {"path", "version", "source"}
            assert info[lib]["source"] in ("system", "wheel", "override")
            assert os.path.isabs(info[lib]["path"]) or info[lib]["path"].startswith("lib")
    if info["driver"] is None:
        assert not info["gpu"]
        assert "the CUDA driver (libcuda) cannot be loaded" in info["reason"]
        assert info["devices"] == []


def test_the_wheels_of_this_python_are_found():
    cublas = wheel_libs("libcublas.so.1[23]")
    if not cublas:
        pytest.skip("no nvidia-cublas wheel in this environment")
    info = voisin.cuda_info()
    assert info["cublas"]["source"] == "wheel", info
    assert info["cublas"]["path"] in cublas
    assert any(s.startswith("wheel ") for s in info["searched"])
    nvrtc = wheel_libs("libnvrtc.so.1[23]")
    if nvrtc:
        assert info["nvrtc"]["source"] == "wheel", info
        assert info["nvrtc"]["path"] in nvrtc
        # The newest major is taken where no driver limits it.
        assert info["nvrtc"]["path"].endswith(max(os.path.basename(f) for f in nvrtc))


def test_the_override_folders_are_the_only_place_searched(tmp_path):
    info = info_in_a_new_process(VOISIN_CUDA_LIBS=str(tmp_path))
    assert info["searched"] == [f"VOISIN_CUDA_LIBS folder {tmp_path}"]
    assert info["cublas"] is None and info["nvrtc"] is None
    assert any("cuBLAS" in n and "VOISIN_CUDA_LIBS" in n for n in info["notes"]), info
    assert not info["gpu"]
    found = wheel_libs("libcublas.so.1[23]")
    if found:
        folder = os.path.dirname(found[0])
        info = info_in_a_new_process(VOISIN_CUDA_LIBS=folder)
        assert info["cublas"]["source"] == "override"
        assert os.path.dirname(info["cublas"]["path"]) == folder


def test_the_kernel_cache_folder_follows_its_variables(tmp_path):
    assert info_in_a_new_process(VOISIN_CACHE_DIR=str(tmp_path))["kernel_cache"] == str(tmp_path)
    assert info_in_a_new_process(VOISIN_CACHE_DIR="off")["kernel_cache"] is None
    xdg = info_in_a_new_process(VOISIN_CACHE_DIR=None, XDG_CACHE_HOME=str(tmp_path))
    assert xdg["kernel_cache"] == os.path.join(str(tmp_path), "voisin", "kernels")


def test_the_wheel_holds_kernels_compiled_ahead_of_time():
    if not os.environ.get("VOISIN_EXPECT_PREBUILT"):
        pytest.skip("VOISIN_EXPECT_PREBUILT unset: this build may lack NVRTC (scripts/test-all)")
    info = voisin.cuda_info()
    assert info["prebuilt_kernels"] == ["sm_80", "sm_86", "sm_89", "sm_90", "compute_90"]
    assert info["prebuilt_nvrtc"].startswith("12."), info


@pytest.mark.gpu
def test_a_first_call_on_a_gpu_the_wheel_has_kernels_for_compiles_nothing(tmp_path):
    info = voisin.cuda_info()
    arch = info["devices"][0]["arch"]
    if arch not in info["prebuilt_kernels"]:
        pytest.skip(f"this build has no kernels for {arch}")
    code = (
        "import numpy as np, voisin\n"
        "x = np.random.default_rng(0).normal(size=(2000, 32)).astype(np.float32)\n"
        "d, i = voisin.knn(x, x[:100], 5, device='cuda')\n"
        "assert (i[:, 0] == np.arange(100)).all()\n"
    )
    env = dict(os.environ, VOISIN_CACHE_DIR=str(tmp_path / "cache"))
    subprocess.run([sys.executable, "-c", code], env=env, check=True)
    # Kernels compiled at run time would have gone to the cache.
    assert not (tmp_path / "cache").exists() or os.listdir(tmp_path / "cache") == []


@pytest.mark.gpu
def test_kernels_compiled_at_run_time_are_cached_and_reused(tmp_path):
    if voisin.cuda_info()["nvrtc"] is None:
        pytest.skip("no NVRTC: nothing compiles at run time")
    # VOISIN_PREBUILT=off: the built kernels are ignored, as on a GPU the build has none for.
    env = dict(os.environ, VOISIN_CACHE_DIR=str(tmp_path), VOISIN_PREBUILT="off")
    code = (
        "import numpy as np, voisin\n"
        "x = np.random.default_rng(0).normal(size=(500, 8)).astype(np.float32)\n"
        "print(int(voisin.knn(x, x, 3, device='cuda')[1].sum()))\n"
    )

    def run():
        return subprocess.run([sys.executable, "-c", code], env=env, capture_output=True,
                              text=True, check=True).stdout

    def files():
        return {n: (os.stat(tmp_path / n).st_ino, os.stat(tmp_path / n).st_mtime_ns)
                for n in os.listdir(tmp_path)}

    first = run()
    cached = files()
    assert cached and all(n.endswith(".bin") for n in cached), cached
    # Only the modules a k-NN launches were compiled: no index or string kernels.
    assert not any(n.startswith(("index-", "strings-")) for n in cached), cached
    # A second process loads them: the same files, none written again, the same answer.
    assert run() == first
    assert files() == cached


@pytest.mark.gpu
@pytest.mark.parametrize("override", [False, True])
def test_the_cublas_that_runs_is_the_one_reported(override):
    # Every cuBLAS file mapped after a GPU search is the one cuda_info() names, also where the
    # system's loader path holds another (the device's LD_LIBRARY_PATH lists a toolkit).
    env = {}
    if override:
        found = wheel_libs("libcublas.so.1[23]")
        if not found:
            pytest.skip("no nvidia-cublas wheel to name in VOISIN_CUDA_LIBS")
        env["VOISIN_CUDA_LIBS"] = os.pathsep.join(
            sorted({os.path.dirname(f) for f in found + wheel_libs("libnvrtc.so.1[23]")}))
    code = (
        "import json, numpy as np, voisin\n"
        "x = np.random.default_rng(0).normal(size=(3000, 64)).astype(np.float32)\n"
        "voisin.knn_graph(x, 10, device='cuda')\n"
        "maps = {l.split()[5] for l in open('/proc/self/maps')\n"
        "        if len(l.split()) > 5 and '/libcublas.so' in l}\n"
        "print(json.dumps([voisin.cuda_info()['cublas'], sorted(maps)]))\n"
    )
    out = subprocess.run([sys.executable, "-c", code], env=dict(os.environ, **env),
                         capture_output=True, text=True, check=True).stdout
    reported, mapped = json.loads(out)
    assert mapped == [os.path.realpath(reported["path"])], (reported, mapped)
    if override:
        assert reported["source"] == "override"
