"""The GPU-loan scripts (scripts/device_kit.sh at home, scripts/device_run.sh on the machine), run here on the CPU at smoke."""
import json, os, subprocess, sys, tarfile
from pathlib import Path
import pytest

ROOT = Path(__file__).resolve().parents[1]
RUN = ROOT / 'scripts' / 'device_run.sh'


def _run(tmp_path, *names, **env):
    e = {**os.environ, 'PYTHON': sys.executable, 'PROFILE': 'smoke', 'DEVICE': 'cpu', 'WORKERS': '1', 'LIMIT': '240',
         'OUT': str(tmp_path / 'out'), 'RELBOOK_GIT_SHA': 'abc1234', 'RELBOOK_RESULTS': str(tmp_path / 'results'),
         'WHEELS': str(tmp_path / 'no-wheels'), **env}     # not a developer's .whl/ (GPU-machine wheels, Python 3.12)
    e = {k: v for k, v in e.items() if v is not None}
    return subprocess.run(['bash', str(RUN), *names], cwd=tmp_path, env=e, capture_output=True, text=True, timeout=300)


def test_device_run_campaign_archive(tmp_path):
    "One command's work on the CPU: a campaign of a named experiment whose archive holds its rows, naming the given commit."
    p = _run(tmp_path, 'order_fit')
    assert p.returncode == 0, p.stdout[-2000:] + p.stderr[-2000:]
    assert 'CUDA graphs: 0' in p.stdout                      # graphs only after tests/test_cuda.py passes on a GPU
    archive = tmp_path / 'out' / 'campaign.tar.gz'
    with tarfile.open(archive) as tar:
        manifest = json.load(tar.extractfile('manifest.json'))
        rows = [json.loads(l) for l in tar.extractfile('rows/order_fit-smoke.jsonl').read().decode().splitlines()]
    assert manifest['finished'] == ['order_fit'] and manifest['commit'] == 'abc1234', manifest
    assert rows and all(r['git_sha'] == 'abc1234' and r['profile'] == 'smoke' for r in rows)


@pytest.mark.parametrize('unset, message', [('OUT', 'set OUT'), ('RELBOOK_GIT_SHA', 'set RELBOOK_GIT_SHA')])
def test_device_run_refuses_without_out_or_commit(tmp_path, unset, message):
    p = _run(tmp_path, 'order_fit', **{unset: None})
    assert p.returncode != 0 and message in p.stderr, p.stderr
    assert not (tmp_path / 'out' / 'campaign.tar.gz').exists()


def test_device_run_leaves_no_campaign_without_time(tmp_path):
    "A limit that leaves under a minute after set-up starts no campaign and says so."
    p = _run(tmp_path, 'order_fit', LIMIT='60')
    assert p.returncode == 1 and 'under a minute left' in p.stdout, p.stdout
    assert not (tmp_path / 'out' / 'campaign.tar.gz').exists()


def test_device_kit_pins_what_the_venv_runs():
    "The kit's wheels are the versions this project is tested with (the venv's), or the GPU machine runs other code."
    from importlib.metadata import version
    kit = (ROOT / 'scripts' / 'device_kit.sh').read_text()
    for name in ('gymnasium', 'farama-notifications', 'mathematics-dataset'):
        assert f'{name}=={version(name)}' in kit, (name, version(name))


def _notebook(path, source):
    nb = {'cells': [{'cell_type': 'code', 'execution_count': None, 'id': 'a', 'metadata': {}, 'outputs': [], 'source': source}],
          'metadata': {}, 'nbformat': 4, 'nbformat_minor': 5}
    path.write_text(json.dumps(nb)); return path


@pytest.mark.parametrize('source, ok', [('assert 1 + 1 == 2', True), ('assert False, "planted"', False)])
def test_device_run_nbtest_mode(tmp_path, source, ok):
    "NBTEST=1: the notebooks at smoke on the device (here one planted notebook on the CPU), its exit status the tests'."
    nb = _notebook(tmp_path / 'planted.ipynb', source)
    p = _run(tmp_path, NBTEST='1', NB_PATH=str(nb), NB_WORKERS='1')
    assert (p.returncode == 0) == ok, p.stdout[-2000:] + p.stderr[-2000:]
    log = (tmp_path / 'out' / 'nbtest.log').read_text()
    assert 'planted.ipynb' in log and ('Success.' in log) == ok and ('AssertionError: planted' in log) != ok, log[-2000:]
    import re                                  # each line stamped, each notebook's start and end as they come (a cut-off run says which ended)
    assert re.search(r'^\d\d:\d\d:\d\d Starting .*planted\.ipynb$', log, re.M) and re.search(r'^\d\d:\d\d:\d\d - Completed .*planted\.ipynb$', log, re.M), log
    assert not (tmp_path / 'out' / 'campaign.tar.gz').exists()          # a notebook run starts no campaign


def test_device_run_reuses_the_gpu_check_on_a_warm_machine(tmp_path):
    """The GPU check (tests/test_cuda.py, here a planted command that counts its runs) runs once per tree on a warm machine: a
    second call with the same tree reuses its outcome, graphs and all; another commit runs it again."""
    counter, check = tmp_path / 'runs', tmp_path / 'check.sh'
    check.write_text(f'echo run >> {counter}\necho "FAILED tests/test_cuda.py::test_cuda_graph_trains_the_math_models_as_eager_does"\nexit 1\n')
    env = dict(DEVICE='cuda', LIMIT='60', STATE=str(tmp_path / 'state'), TEST_CUDA=f'bash {check}')   # 60 s: no campaign after it
    first, second = (_run(tmp_path, 'order_fit', **env) for _ in range(2))
    assert counter.read_text().count('run') == 1, (first.stdout, second.stdout)
    for p in (first, second):    # only the mathematics graph test failed: graphs on, those fits eager, in both calls
        assert 'CUDA graphs: 1' in p.stdout and 'under a minute left' in p.stdout, p.stdout
    assert 'eager: AlsoOn' in second.stdout and 'not run again' in second.stdout, second.stdout
    third = _run(tmp_path, 'order_fit', RELBOOK_GIT_SHA='def5678', **env)
    assert counter.read_text().count('run') == 2 and 'not run again' not in third.stdout, third.stdout


def test_device_run_skips_the_gpu_check_where_no_experiment_replays_graphs(tmp_path):
    """GRAPHS=auto: where the plan says no experiment of the campaign would replay a CUDA graph (every fit refused, e.g. a
    changing learning rate), the GPU check (a planted command that counts its runs) is not run; where one would, it is."""
    counter, check, plan = tmp_path / 'runs', tmp_path / 'check.sh', tmp_path / 'plan.json'
    check.write_text(f'echo run >> {counter}\nexit 0\n')
    entry = lambda **e: json.dumps(dict(profile='smoke', workers=4, experiments={'order_fit': e}))
    env = dict(DEVICE='cuda', LIMIT='60', STATE=str(tmp_path / 'state'), TEST_CUDA=f'bash {check}', RELBOOK_GPU_PLAN=str(plan))
    plan.write_text(entry(graphable=False, graph_refusal='a planted refusal'))
    p = _run(tmp_path, 'order_fit', **env)
    assert not counter.exists() and 'tests/test_cuda.py not run' in p.stdout and 'a planted refusal' in p.stdout, p.stdout + p.stderr
    assert 'CUDA graphs: 0' in p.stdout, p.stdout
    plan.write_text(entry(graphable=True))
    p = _run(tmp_path, 'order_fit', **env)
    assert counter.read_text().count('run') == 1 and 'CUDA graphs: 1' in p.stdout, p.stdout + p.stderr
