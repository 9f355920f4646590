"""The results store and the training loop under faults: torn writes, a stale CSV, SIGKILL, racing workers, bad configs."""
import json
import math
import os
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pandas as pd
import pytest
import torch
import torch.nn as nn

from relbook.harness import Classification, ResultsStore, Task, TrainConfig, fit, run_sweep


def _blobs(n, seed):
    g = torch.Generator().manual_seed(seed)
    y = torch.randint(0, 2, (n,), generator=g)
    return torch.randn(n, 2, generator=g) + 2 * y[:, None].float() - 1, y


# --- torn lines and the CSV twin ------------------------------------------------------------------

def test_torn_last_line_does_not_cost_the_next_row(tmp_path):
    store = ResultsStore(tmp_path / 's.jsonl')
    store.add({'seed': 0}, {'acc': 0.5})
    with open(store.path, 'a') as f: f.write('{"params": {"seed": 1}, "se')     # a crash mid-write
    store.add({'seed': 2}, {'acc': 0.7})
    with pytest.warns(UserWarning, match='torn'):
        rows = store.rows()
    assert [r['seed'] for r in rows] == [0, 2]
    with pytest.warns(UserWarning): assert len(store.done()) == 2


def test_csv_twin_is_atomic_and_rebuilt_when_stale(tmp_path):
    store = ResultsStore(tmp_path / 's.jsonl')
    for s in range(3): store.add({'seed': s}, {'acc': s / 10})
    csv = store.to_csv()
    assert not list(tmp_path.glob('*.tmp')) and len(pd.read_csv(csv)) == 3
    csv.write_text('seed,acc\n0,0.0\n')                 # stale: a row short
    assert store.sync_csv() == csv and len(pd.read_csv(csv)) == 3
    csv.write_text('\x00garbage')                       # unreadable
    assert store.sync_csv() == csv and len(pd.read_csv(csv)) == 3
    assert store.sync_csv() is None                     # up to date: left alone


# --- resume after SIGKILL gives the never-stopped result --------------------------------------------

_TRIAL = '''
import sys, time, torch, torch.nn as nn
from relbook.harness import Classification, ResultsStore, TrainConfig, fit, run_sweep
def blobs(n, seed):
    g = torch.Generator().manual_seed(seed)
    y = torch.randint(0, 2, (n,), generator=g)
    return torch.randn(n, 2, generator=g) + 2 * y[:, None].float() - 1, y
class Slow(Classification):
    def loss(self, model, batch):
        time.sleep(float(sys.argv[2])); return super().loss(model, batch)
def trial(seed, width):
    net = nn.Sequential(nn.Linear(2, width), nn.Dropout(0.3), nn.ReLU(), nn.Linear(width, 2))   # dropout: the global RNG matters
    # 100 items in batches of 32: steps end mid-epoch, so a resume must know its place in the epoch
    cfg = TrainConfig(lr=0.05, max_steps=60, eval_every=5, batch_size=32, checkpoint_secs=0)
    fit(net, Slow(), blobs(100, seed), blobs(64, 99), cfg, progress=False)
    return {'w': [float(v) for v in net[0].weight.flatten()]}
trials = [dict(seed=s, width=w) for s in range(int(sys.argv[3])) for w in (8,)]
run_sweep('faults', trials, trial, store=ResultsStore(sys.argv[1]), progress=False)
'''


def _script(tmp_path):
    p = tmp_path / 'trial.py'; p.write_text(_TRIAL); return p


def _env():
    return {**os.environ, 'RELBOOK_PROFILE': 'smoke', 'OMP_NUM_THREADS': '1', 'RELBOOK_PROGRESS': '0'}


def test_sigkill_then_resume_equals_never_stopped(tmp_path):
    script = _script(tmp_path)
    straight = tmp_path / 'straight' / 'r.jsonl'
    subprocess.run([sys.executable, script, straight, '0', '1'], check=True, env=_env())
    killed = tmp_path / 'killed' / 'r.jsonl'
    proc = subprocess.Popen([sys.executable, script, killed, '0.05', '1'], env=_env())
    ck_dir = killed.parent / 'checkpoints' / 'r'
    deadline = time.time() + 60
    while not list(ck_dir.glob('*.pt')) and time.time() < deadline: time.sleep(0.05)
    time.sleep(0.4)                                     # a few more steps past the first checkpoint, then mid-step
    proc.send_signal(signal.SIGKILL); proc.wait()
    assert list(ck_dir.glob('*.pt')), "the trial left no checkpoint to resume from"
    assert not killed.exists() or not ResultsStore(killed).rows(), "the trial must not have finished before the kill"
    subprocess.run([sys.executable, script, killed, '0', '1'], check=True, env=_env())
    a, b = ResultsStore(straight).rows()[0], ResultsStore(killed).rows()[0]
    assert a['w'] == b['w'], "a resumed trial must end bit for bit where a never-stopped one ends"
    assert (a['fit_best_step'], a['fit_max_steps']) == (b['fit_best_step'], b['fit_max_steps'])


# --- workers that share a store -----------------------------------------------------------------------

def test_two_unsharded_workers_split_the_trials(tmp_path):
    script, store = _script(tmp_path), tmp_path / 'r.jsonl'
    procs = [subprocess.Popen([sys.executable, script, store, '0.002', '4'], env=_env()) for _ in range(2)]
    assert [p.wait() for p in procs] == [0, 0]
    seeds = sorted(r['seed'] for r in ResultsStore(store).rows())
    assert seeds == [0, 1, 2, 3], f"each trial must run exactly once, got seeds {seeds}"


def test_mismatched_shards_are_refused(tmp_path):
    script, store = _script(tmp_path), tmp_path / 'r.jsonl'
    first = subprocess.Popen([sys.executable, script, store, '0.02', '3'], env={**_env(), 'RELBOOK_SHARD': '0/2'})
    lock = tmp_path / 'checkpoints' / 'r' / '.shards-2'
    deadline = time.time() + 60
    while not lock.exists() and time.time() < deadline: time.sleep(0.05)
    second = subprocess.run([sys.executable, script, store, '0.02', '3'], env={**_env(), 'RELBOOK_SHARD': '0/3'},
                            capture_output=True, text=True)
    first.wait()
    assert second.returncode != 0 and 'use the same n in every worker' in second.stderr, second.stderr[-500:]


# --- configurations that used to train silently wrong ---------------------------------------------------

@pytest.mark.parametrize('kw, msg', [(dict(grad_clip=-1.0), 'grad_clip must be a positive finite number'),
                                     (dict(grad_clip=float('inf')), 'grad_clip must be a positive finite number'),
                                     (dict(eval_batch_size=0), 'eval_batch_size must be a positive int'),
                                     (dict(lr=float('nan')), 'lr must be a positive finite number'),
                                     (dict(checkpoint_secs=-1), 'checkpoint_secs must be')])
def test_bad_train_config(kw, msg):
    with pytest.raises(ValueError, match=msg): TrainConfig(**kw)


def test_monitor_that_the_task_does_not_report():
    with pytest.raises(ValueError, match="monitor must name a metric that Classification reports"):
        fit(nn.Linear(2, 2), Classification(), _blobs(64, 0), _blobs(32, 1), TrainConfig(monitor='f1', max_epochs=1),
            progress=False, checkpoint=None)


class _NaNMetric(Classification):
    def batch_metrics(self, model, batch):
        ms, n = super().batch_metrics(model, batch)
        return {**ms, 'acc': torch.tensor(float('nan'))}, n


def test_nan_validation_metric_is_an_error_not_a_restore():
    with pytest.raises(FloatingPointError, match='val_acc is nan'):
        fit(nn.Linear(2, 2), _NaNMetric(), _blobs(64, 0), _blobs(32, 1), TrainConfig(monitor='acc', mode='max', max_epochs=3),
            progress=False, checkpoint=None)


def test_nan_training_loss_is_an_error():
    net = nn.Linear(2, 2)
    with torch.no_grad(): net.weight.fill_(float('nan'))
    with pytest.raises(FloatingPointError, match='training loss became nan'):
        fit(net, Classification(), _blobs(64, 0), None, TrainConfig(max_epochs=2), progress=False, checkpoint=None)


# --- a time budget stops a fit at a checkpoint; resuming it gives the uninterrupted result ---------------

def test_time_budget_checkpoints_and_resumes(tmp_path):
    from relbook.harness import BudgetExhausted, time_budget

    class Slow(Classification):
        def loss(self, model, batch): time.sleep(0.01); return super().loss(model, batch)

    def run(ckpt):
        torch.manual_seed(0); net = nn.Linear(2, 2)
        fit(net, Slow(), _blobs(100, 0), _blobs(32, 1), TrainConfig(lr=0.05, max_steps=60, eval_every=7, batch_size=32),
            progress=False, checkpoint=ckpt)
        return net.weight.detach().clone()
    straight = run(None)
    ck = tmp_path / 'c.pt'
    with time_budget(0.15), pytest.raises(BudgetExhausted, match='time budget spent at step'):
        run(ck)
    assert ck.exists()
    assert torch.equal(run(ck), straight) and not ck.exists()


def test_campaign_with_two_workers_and_merge(tmp_path):
    "Two worker processes share the stores (locks split the trials); the archive merges into a fresh folder without duplicates."
    from relbook.campaign import campaign, merge
    env_old = os.environ.get('RELBOOK_RESULTS')
    try:
        os.environ['RELBOOK_RESULTS'] = str(tmp_path / 'gpu')
        import shutil, warnings
        with warnings.catch_warnings(record=True) as w:       # MPS asked for: used where the machine has it, else said and skipped
            warnings.simplefilter('always')
            m = campaign(['order_relation'], 'smoke', budget=300, out=tmp_path / 'a.tar.gz', workers=2, mps=True)
        if shutil.which('nvidia-cuda-mps-control') is None:
            assert m['mps'] is False and any('running without MPS' in str(x.message) for x in w)
        rows = ResultsStore(tmp_path / 'gpu' / 'order_relation-smoke.jsonl').rows()
        keys = [json.dumps(r['params'], sort_keys=True) for r in rows]
        assert m['finished'] == ['order_relation'] and len(keys) == len(set(keys)) > 0
        assert m['rows'] == {'order_relation-smoke.jsonl': len(rows)}
        r = merge(tmp_path / 'a.tar.gz', tmp_path / 'home')
        assert r['added'] == {'order_relation-smoke.jsonl': len(rows)} and merge(tmp_path / 'a.tar.gz', tmp_path / 'home')['duplicates'] == len(rows)
    finally:
        if env_old is None: os.environ.pop('RELBOOK_RESULTS', None)
        else: os.environ['RELBOOK_RESULTS'] = env_old


def test_merge_restores_checkpoints_of_unfinished_trials(tmp_path):
    "An archive from a campaign stopped mid-trial carries that trial's checkpoint; merge puts it where run_sweep resumes it."
    import tarfile
    from relbook.campaign import _add_bytes, merge
    arc = tmp_path / 'a.tar.gz'
    with tarfile.open(arc, 'w:gz') as tar:
        _add_bytes(tar, 'manifest.json', json.dumps({'profile': 'quick'}).encode())
        _add_bytes(tar, 'rows/x-quick.jsonl', (json.dumps({'params': {'seed': 0}, 'seed': 0, 'acc': 1.0}) + '\n').encode())
        _add_bytes(tar, 'checkpoints/x-quick/0123456789abcdef.pt', b'ckpt')
    r = merge(arc, tmp_path / 'home')
    assert r['added'] == {'x-quick.jsonl': 1} and r['checkpoints'] == 1
    assert (tmp_path / 'home' / 'checkpoints' / 'x-quick' / '0123456789abcdef.pt').read_bytes() == b'ckpt'


def test_carried_models_travel_in_archives_of_bounded_size(tmp_path, monkeypatch):
    "Models a later experiment starts from (chapter 11's imitation agents) leave in archives under the limit and merge back byte for byte; older ones stay."
    import os
    from relbook.campaign import pack_carried, merge
    monkeypatch.setenv('RELBOOK_RESULTS', str(tmp_path / 'gpu_machine'))
    d = tmp_path / 'gpu_machine' / 'checkpoints' / 'boxworld_imitation_models'
    d.mkdir(parents=True)
    old = d / 'gpu-relational-s9.pt'; old.write_bytes(b'old')
    os.utime(old, (1000, 1000))                                        # written before the campaign started
    blobs = {f'gpu-simplicial-s{i}.pt': os.urandom(600_000) for i in range(5)}   # incompressible, like weights
    for name, b in blobs.items(): (d / name).write_bytes(b)
    paths = pack_carried(tmp_path / 'campaign.tar.gz', 'gpu', started=2000, limit=2 ** 21)   # 2 MiB: three files an archive
    assert [p.name for p in paths] == ['campaign-carried-1.tar.gz', 'campaign-carried-2.tar.gz'], paths
    assert all(p.stat().st_size <= 2 ** 21 for p in paths)
    home = tmp_path / 'home'
    assert sum(merge(p, home)['checkpoints'] for p in paths) == 5
    for name, b in blobs.items(): assert (home / 'checkpoints' / 'boxworld_imitation_models' / name).read_bytes() == b
    assert not (home / 'checkpoints' / 'boxworld_imitation_models' / old.name).exists()


def test_a_carried_model_larger_than_an_archive_travels_in_parts(tmp_path, monkeypatch):
    "A model over the archive limit (chapter 14's 67 MB language model at gpu) is split, joined in any merge order, checked by sha256; only the globbed models go."
    import os, tarfile, io, json
    from relbook.campaign import pack_carried, merge
    monkeypatch.setenv('RELBOOK_RESULTS', str(tmp_path / 'gpu_machine'))
    d = tmp_path / 'gpu_machine' / 'checkpoints' / 'dat_lm_models'
    d.mkdir(parents=True)
    big = os.urandom(5 * 2 ** 20)                                      # 5 MiB against a 2 MiB limit: three parts
    (d / 'gpu-DAT-s0.pt').write_bytes(big)
    (d / 'gpu-Transformer-s0.pt').write_bytes(os.urandom(1000))       # no figure reads it: not carried
    paths = pack_carried(tmp_path / 'campaign.tar.gz', 'gpu', started=0, limit=2 ** 21)
    assert len(paths) == 3 and all(p.stat().st_size <= 2 ** 21 for p in paths), paths
    members = [n for p in paths for n in tarfile.open(p).getnames() if n != 'manifest.json']
    assert members == [f'checkpoints/dat_lm_models/gpu-DAT-s0.pt.part-{i}-of-3' for i in (1, 2, 3)], members
    home = tmp_path / 'home'; dest = home / 'checkpoints' / 'dat_lm_models'
    counts = [merge(p, home)['checkpoints'] for p in reversed(paths)]  # any order: joined when the last part arrives
    assert counts == [0, 0, 1], counts
    assert (dest / 'gpu-DAT-s0.pt').read_bytes() == big and sorted(x.name for x in dest.iterdir()) == ['gpu-DAT-s0.pt']
    # a part that does not belong to the model (another campaign's, or damaged) is refused, not joined into a wrong model
    (dest / 'gpu-DAT-s0.pt').unlink()
    bad = tmp_path / 'bad.tar.gz'
    with tarfile.open(paths[2]) as src, tarfile.open(bad, 'w:gz') as out:
        for m in src.getmembers():
            data = src.extractfile(m).read()
            if m.name != 'manifest.json': data = bytes([data[0] ^ 1]) + data[1:]
            info = tarfile.TarInfo(m.name); info.size = len(data); out.addfile(info, io.BytesIO(data))
    merge(paths[0], home); merge(paths[1], home)
    with pytest.raises(ValueError, match='sha256'): merge(bad, home)
    assert not (dest / 'gpu-DAT-s0.pt').exists()
    with pytest.raises(ValueError, match='part number'):
        arc = tmp_path / 'part0.tar.gz'
        with tarfile.open(arc, 'w:gz') as out:
            for name, data in [('checkpoints/dat_lm_models/x.pt.part-0-of-2', b'x'), ('manifest.json', json.dumps({'profile': 'gpu'}).encode())]:
                info = tarfile.TarInfo(name); info.size = len(data); out.addfile(info, io.BytesIO(data))
        merge(arc, home)


def test_carried_models_over_what_one_command_returns_wait_for_the_next(tmp_path, monkeypatch):
    "The device sends back 64 MiB a command: whole models up to `total` go now, the rest are left pending and the next campaign command carries them."
    import os, tarfile
    from relbook.campaign import pack_carried, merge, PENDING
    monkeypatch.setenv('RELBOOK_RESULTS', str(tmp_path / 'gpu_machine'))
    root = tmp_path / 'gpu_machine' / 'checkpoints'
    d = root / 'tp_roles_models'; d.mkdir(parents=True)
    blobs = {f'gpu-TP-s{i}.pt': os.urandom(3 * 2 ** 20) for i in range(2)}
    for name, b in blobs.items(): (d / name).write_bytes(b)
    for sub in 'abc': (tmp_path / sub).mkdir()
    with pytest.warns(UserWarning, match='left for the next campaign'):
        first = pack_carried(tmp_path / 'a' / 'campaign.tar.gz', 'gpu', started=0, limit=2 ** 21, total=4 * 2 ** 20)
    sent = {n.split('/')[-1].split('.part')[0] for p in first for n in tarfile.open(p).getnames() if n != 'manifest.json'}
    assert sent == {'gpu-TP-s0.pt'} and sum(p.stat().st_size for p in first) <= 4 * 2 ** 20, (sent, first)
    assert (root / PENDING).exists()
    # the next command: nothing new was written since it started, but the pending model goes now, and the ledger is cleared
    second = pack_carried(tmp_path / 'b' / 'campaign.tar.gz', 'gpu', started=time.time() + 3600, limit=2 ** 21, total=4 * 2 ** 20)
    assert second and not (root / PENDING).exists()
    home = tmp_path / 'home'
    for p in first + second: merge(p, home)
    for name, b in blobs.items(): assert (home / 'checkpoints' / 'tp_roles_models' / name).read_bytes() == b
    # and with nothing new and nothing pending, nothing is carried
    assert pack_carried(tmp_path / 'c' / 'campaign.tar.gz', 'gpu', started=time.time() + 3600, limit=2 ** 21) == []


def _members(path):
    import tarfile
    with tarfile.open(path, 'r|gz') as tar: return [m.name for m in tar]


def test_a_campaign_packs_its_rows_first_and_each_model_archive_once(tmp_path, monkeypatch):
    "The rows go into the campaign archive (manifest first) before any model is packed; the interrupted trials' checkpoints are chosen by size, newest first, within the bytes and files one command returns, and each archive is written once."
    import os, relbook.campaign as C
    monkeypatch.setenv('RELBOOK_RESULTS', str(tmp_path / 'gpu_machine'))
    root = tmp_path / 'gpu_machine'; (root / 'checkpoints' / 'x-gpu').mkdir(parents=True)
    (root / 'x-gpu.jsonl').write_text(''.join(json.dumps({'params': {'seed': s}, 'seed': s}) + '\n' for s in range(2)))
    blobs = {}
    for i in range(6):                                                  # six interrupted trials, the last one newest
        p = root / 'checkpoints' / 'x-gpu' / f'{i:016x}.pt'; blobs[p.name] = os.urandom(700 * 2 ** 10); p.write_bytes(blobs[p.name])
        os.utime(p, (1000 + i, 1000 + i))
    out = tmp_path / 'campaign.tar.gz'
    m = C.pack(out, 'gpu', {}, started=0, manifest={'profile': 'gpu'})
    assert _members(out) == ['manifest.json', 'rows/x-gpu.jsonl'] and m['rows'] == {'x-gpu.jsonl': 2}
    writes = []
    real = C._write_archive
    monkeypatch.setattr(C, '_write_archive', lambda path, *a: (writes.append(path.name), real(path, *a)))
    with pytest.warns(UserWarning, match='no room to send back the checkpoints of 2 interrupted trials'):
        paths = C.pack_carried(out, 'gpu', started=0, limit=2 ** 21, total=4 * 2 ** 20, files=2)  # two models an archive, two archives
    assert writes == [p.name for p in paths] == ['campaign-carried-1.tar.gz', 'campaign-carried-2.tar.gz']
    assert all(p.stat().st_size <= 2 ** 21 for p in paths) and not list(tmp_path.glob('*.partial'))
    sent = sorted(n.split('/')[-1] for p in paths for n in _members(p) if n != 'manifest.json')
    assert sent == sorted(f'{i:016x}.pt' for i in (2, 3, 4, 5)), sent   # the newest four
    home = tmp_path / 'home'
    assert C.merge(out, home)['added'] == {'x-gpu.jsonl': 2}
    assert sum(C.merge(p, home)['checkpoints'] for p in paths) == 4
    for name in sent: assert (home / 'checkpoints' / 'x-gpu' / name).read_bytes() == blobs[name]


def test_merge_gives_up_what_a_torn_archive_holds(tmp_path):
    "A campaign archive cut short (the command killed while packing) still yields its whole rows and checkpoints, with a warning; what cannot be read is refused clearly."
    import os, io, tarfile
    from relbook.campaign import _write_archive, _add_bytes, merge
    rows = ''.join(json.dumps({'params': {'seed': s}, 'seed': s}) + '\n' for s in range(3)).encode()
    a, b = os.urandom(2 ** 20), os.urandom(2 ** 20)
    def add_all(tar):
        _add_bytes(tar, 'rows/x-gpu.jsonl', rows); _add_bytes(tar, 'checkpoints/x-gpu/a.pt', a); _add_bytes(tar, 'checkpoints/x-gpu/b.pt', b)
    def torn(path, frac=0.75):
        data = path.read_bytes(); path.write_bytes(data[:int(len(data) * frac)]); return path
    arc = tmp_path / 'new.tar.gz'; _write_archive(arc, {'profile': 'gpu'}, add_all); torn(arc)   # cut inside b.pt
    with pytest.warns(UserWarning, match='ends early'): r = merge(arc, tmp_path / 'home')
    assert r['torn'] and r['added'] == {'x-gpu.jsonl': 3} and r['checkpoints'] == 1
    assert (tmp_path / 'home' / 'checkpoints' / 'x-gpu' / 'a.pt').read_bytes() == a
    assert not (tmp_path / 'home' / 'checkpoints' / 'x-gpu' / 'b.pt').exists()
    old = tmp_path / 'old.tar.gz'                                       # packed the old way: the manifest last
    with tarfile.open(old, 'w:gz') as tar: add_all(tar); _add_bytes(tar, 'manifest.json', json.dumps({'profile': 'gpu'}).encode())
    with pytest.warns(UserWarning, match='ends early'): r = merge(torn(old), tmp_path / 'home2')
    assert r['added'] == {'x-gpu.jsonl': 3} and r['manifest']['profile'] == 'gpu' and r['manifest']['torn_before_manifest']
    bare = tmp_path / 'bare.tar.gz'                                     # no rows to name a profile, no manifest: refused
    with tarfile.open(bare, 'w:gz') as tar:
        _add_bytes(tar, 'checkpoints/x-gpu/a.pt', a); _add_bytes(tar, 'checkpoints/x-gpu/b.pt', b)
        _add_bytes(tar, 'manifest.json', json.dumps({'profile': 'gpu'}).encode())
    with pytest.raises(ValueError, match='no manifest'): merge(torn(bare), tmp_path / 'home3')
    junk = tmp_path / 'junk.tar.gz'; junk.write_bytes(b'not an archive')
    with pytest.raises(ValueError, match='not a readable campaign'): merge(junk, tmp_path / 'home4')


_STUBBORN = '''
import time
from relbook.harness import experiment, grid, run_sweep

def _trial(seed):
    if seed > 0: time.sleep(40)        # work that never checks the deadline (as the RL learner did on 2026-11-27)
    return {'x': seed}

@experiment('stubborn_demo')
def _stubborn():
    return run_sweep('stubborn_demo', grid(seed=[0, 1, 2, 3]), _trial)
'''


def test_a_campaign_stops_work_that_ignores_its_deadline_and_packs_what_finished(tmp_path, monkeypatch):
    """Workers still running at the hard deadline (half the packing reserve after the deadline) are killed, the campaign
    returns within its budget, and the rows already stored are in the archive: on an H100 a campaign whose RL trials did not
    check the deadline was killed at the command's limit with nothing packed. The workers load the experiment from a
    `sitecustomize` module (a test experiment, registered in every process; here too, where the campaign plans)."""
    from relbook.campaign import campaign, merge
    from relbook.harness import EXPERIMENTS
    (tmp_path / 'site').mkdir(); (tmp_path / 'site' / 'sitecustomize.py').write_text(_STUBBORN)
    monkeypatch.setenv('PYTHONPATH', os.pathsep.join([str(tmp_path / 'site'), os.environ.get('PYTHONPATH', '')]))
    monkeypatch.setenv('RELBOOK_RESULTS', str(tmp_path / 'gpu'))
    exec(compile(_STUBBORN, 'stubborn', 'exec'), {})
    t0 = time.time()
    try:
        with pytest.warns(UserWarning, match=r'workers \[0, 1\] were still running'):
            m = campaign(['stubborn_demo'], 'smoke', budget=24, reserve=6, out=tmp_path / 'a.tar.gz', workers=2)
    finally: EXPERIMENTS.pop('stubborn_demo', None)
    wall = time.time() - t0
    assert wall < 24, f"the campaign overran its budget: {wall:.1f} s"
    assert m['hard_stopped'] == [0, 1] and m['stopped'] == 'budget' and m['failed_workers'] == {} and m['finished'] == []
    assert m['rows'] == {'stubborn_demo-smoke.jsonl': 1}
    r = merge(tmp_path / 'a.tar.gz', tmp_path / 'home')
    assert r['added'] == {'stubborn_demo-smoke.jsonl': 1}
    assert [x['params'] for x in ResultsStore(tmp_path / 'home' / 'stubborn_demo-smoke.jsonl').rows()] == [{'seed': 0}]


def test_a_one_process_campaign_stops_work_that_ignores_its_deadline(tmp_path, monkeypatch):
    "One process: an alarm raises `HardStop` inside the stubborn trial at the hard deadline; the finished row is packed."
    from relbook.campaign import campaign
    from relbook.harness import EXPERIMENTS
    monkeypatch.setenv('RELBOOK_RESULTS', str(tmp_path / 'gpu'))
    exec(compile(_STUBBORN, 'stubborn', 'exec'), {})
    try:
        t0 = time.time()
        m = campaign(['stubborn_demo'], 'smoke', budget=4, reserve=2, out=tmp_path / 'a.tar.gz', workers=1)
        assert time.time() - t0 < 4 and m['hard_stopped'] == [0] and m['finished'] == [], m
        assert 'the hard deadline passed' in m['stopped'] and m['rows'] == {'stubborn_demo-smoke.jsonl': 1}
    finally: EXPERIMENTS.pop('stubborn_demo', None)


def test_a_campaign_killed_before_its_end_leaves_the_rows_so_far(tmp_path):
    """The device tool kills a command at its limit and sends back what lies in $OUT: a many-worker campaign packs the rows
    stored so far under the archive's name every `interim` seconds, so the killed campaign's archive holds the finished trial."""
    from relbook.campaign import _archive_manifest, merge
    (tmp_path / 'site').mkdir(); (tmp_path / 'site' / 'sitecustomize.py').write_text(_STUBBORN)
    env = {**os.environ, 'PYTHONPATH': os.pathsep.join([str(tmp_path / 'site'), os.environ.get('PYTHONPATH', '')]),
           'RELBOOK_RESULTS': str(tmp_path / 'gpu')}
    arc = tmp_path / 'a.tar.gz'
    code = f"from relbook.campaign import campaign; campaign(['stubborn_demo'], 'smoke', budget=300, out={str(arc)!r}, workers=2, interim=0.5)"
    p = subprocess.Popen([sys.executable, '-c', code], env=env, start_new_session=True)
    try:
        t0, m = time.time(), {}
        while time.time() - t0 < 60 and m.get('rows') != {'stubborn_demo-smoke.jsonl': 1}:
            time.sleep(0.5)
            if arc.exists(): m = _archive_manifest(arc)
        assert p.poll() is None, "the campaign should still be running (its other trials sleep)"
    finally: os.killpg(p.pid, signal.SIGKILL); p.wait()      # the command's limit: everything dies, nothing is packed at the end
    assert m['interim'] is True and m['rows'] == {'stubborn_demo-smoke.jsonl': 1}, m
    r = merge(arc, tmp_path / 'home')
    assert r['added'] == {'stubborn_demo-smoke.jsonl': 1} and not r['torn']


def test_an_interim_pack_leaves_out_a_row_being_written(tmp_path, monkeypatch):
    "`pack(whole_lines=True)` packs whole lines only: a row a worker is appending now waits for the next archive."
    from relbook.campaign import pack, merge
    monkeypatch.setenv('RELBOOK_RESULTS', str(tmp_path / 'gpu'))
    (tmp_path / 'gpu').mkdir()
    whole = json.dumps({'params': {'seed': 0}, 'seed': 0, 'x': 0}) + '\n'
    (tmp_path / 'gpu' / 'x-quick.jsonl').write_text(whole + '{"params": {"seed": 1}, "se')
    m = pack(tmp_path / 'a.tar.gz', 'quick', {}, time.time(), {'profile': 'quick'}, whole_lines=True)
    assert m['rows'] == {'x-quick.jsonl': 1}
    assert merge(tmp_path / 'a.tar.gz', tmp_path / 'home')['added'] == {'x-quick.jsonl': 1}
    (tmp_path / 'gpu' / 'x-quick.jsonl').write_text('{"params": {"seed": 1}, "se')
    assert pack(tmp_path / 'b.tar.gz', 'quick', {}, time.time(), {'profile': 'quick'}, whole_lines=True)['rows'] == {}


@pytest.mark.parametrize('bad', [0, -1.0, float('nan'), '60'])
def test_a_bad_interim_is_refused(bad):
    from relbook.campaign import campaign
    with pytest.raises(ValueError, match='interim must be a positive number'):
        campaign(['order_relation'], 'smoke', budget=10, out='unused.tar.gz', workers=2, interim=bad)


def test_merge_refuses_a_store_with_a_bad_row_whole(tmp_path):
    "A row without params, or one made at another profile than its store's, refuses its store whole: nothing half-merged."
    from relbook.campaign import _write_archive, _add_bytes, merge
    good = [json.dumps({'params': {'seed': s}, 'seed': s, 'profile': 'gpu'}) for s in range(2)]
    for bad, why in ((json.dumps({'seed': 9}), "with its trial's params"),
                     (json.dumps({'params': {'seed': 9}, 'profile': 'full'}), "made at profile 'full' in a 'gpu' store")):
        arc = tmp_path / 'a.tar.gz'
        _write_archive(arc, {'profile': 'gpu'}, lambda tar: _add_bytes(tar, 'rows/x-gpu.jsonl', ('\n'.join(good + [bad]) + '\n').encode()))
        with pytest.raises(ValueError, match=why): merge(arc, tmp_path / 'home')
        assert not (tmp_path / 'home' / 'x-gpu.jsonl').exists() or not (tmp_path / 'home' / 'x-gpu.jsonl').read_text().strip()
    arc = tmp_path / 'b.tar.gz'                                           # a store named for another profile than the manifest's
    _write_archive(arc, {'profile': 'gpu'}, lambda tar: _add_bytes(tar, 'rows/x-quick.jsonl', (good[0] + '\n').encode()))
    with pytest.raises(ValueError, match='must be named <experiment>-gpu.jsonl'): merge(arc, tmp_path / 'home')
    arc = tmp_path / 'c.tar.gz'                                           # and a clean one merges
    _write_archive(arc, {'profile': 'gpu'}, lambda tar: _add_bytes(tar, 'rows/x-gpu.jsonl', ('\n'.join(good) + '\n').encode()))
    assert merge(arc, tmp_path / 'home')['added'] == {'x-gpu.jsonl': 2}


def test_keys_and_rows_share_one_serialisation(tmp_path):
    "A numpy-int parameter is keyed as the int it reads back as (a rerun resumes); a bad parameter is refused before a trial runs."
    import numpy as np
    from relbook.harness import trial_key, ResultsStore
    assert trial_key({'n': np.int64(10), 'lr': np.float32(0.5), 'dims': (1, 2)}) == trial_key({'n': 10, 'lr': 0.5, 'dims': [1, 2]})
    with pytest.raises(ValueError, match=r'params.path must be a JSON value'): trial_key({'path': Path('/x')})
    store = ResultsStore(tmp_path / 'x-quick.jsonl')
    store.add({'n': np.int64(10)}, {'acc': np.float32(0.25), 'curve': np.array([1.0, 2.0])})
    assert trial_key({'n': np.int64(10)}) in store.done()
    row = store.rows()[0]
    assert row['acc'] == 0.25 and row['curve'] == [1.0, 2.0]
    with pytest.warns(UserWarning, match='row.where: a PosixPath is not a JSON value'):
        store.add({'n': 11}, {'where': Path('/x')})               # a computed result is stored (as its str), not lost
    assert store.rows()[-1]['where'] == '/x'


def test_merge_marks_a_row_whose_source_is_not_its_commits(tmp_path):
    "A GPU row names its commit by $RELBOOK_GIT_SHA; made from other source than that commit's, it comes home marked +dirty."
    import subprocess
    from relbook.core import committed_source_hash, repo_root
    from relbook.campaign import _write_archive, _add_bytes, merge
    head = subprocess.run(['git', 'rev-parse', '--short', 'HEAD'], cwd=repo_root(), capture_output=True, text=True).stdout.strip()
    want = committed_source_hash(head)
    if want is None: pytest.skip('no git history here')
    rows = [{'params': {'seed': 0}, 'git_sha': head, 'source_sha': want}, {'params': {'seed': 1}, 'git_sha': head, 'source_sha': 'f' * 12}]
    arc = tmp_path / 'a.tar.gz'
    _write_archive(arc, {'profile': 'gpu'}, lambda tar: _add_bytes(tar, 'rows/x-gpu.jsonl', ''.join(json.dumps(r) + '\n' for r in rows).encode()))
    with pytest.warns(UserWarning, match=r'marked .*\+dirty'): merge(arc, tmp_path / 'home')
    got = {r['seed'] if 'seed' in r else r['params']['seed']: r['git_sha'] for r in ResultsStore(tmp_path / 'home' / 'x-gpu.jsonl').rows()}
    assert got == {0: head, 1: head + '+dirty'}


def test_stored_rows_were_made_from_the_source_of_their_commit():
    "Every committed row that names a clean commit and a source hash was made from that commit's package source."
    import glob
    from relbook.core import committed_source_hash, repo_root
    bad, unchecked, memo = [], set(), {}
    for path in sorted(glob.glob(str(repo_root() / 'results' / '*.jsonl'))):
        for line in open(path):
            if not line.strip(): continue
            r = json.loads(line)
            sha, src = str(r.get('git_sha', '')), r.get('source_sha')
            if not src or not sha or sha.endswith('+dirty') or sha == 'unknown': continue
            if sha not in memo: memo[sha] = committed_source_hash(sha)
            if memo[sha] is None: unchecked.add(sha)
            elif memo[sha] != src: bad.append((Path(path).name, sha, src, memo[sha]))
    if memo and len(unchecked) == len(memo): pytest.skip('no git history here')
    assert not bad, bad[:5]


def test_campaign_caps_reach_the_workers(tmp_path, monkeypatch):
    """A campaign on a GPU caps a GPU-bound experiment's workers (worker_caps, from the plan): the cap is in the manifest, the
    worker over it skips that experiment and runs the next, and every trial of both is stored once. On the CPU no cap
    applies (here the GPU is pretended and the plan's answer planted; the workers themselves run on the CPU)."""
    import torch
    import relbook.campaign as cp
    # a budget no run here comes near (each campaign takes about 8 s here): the work ends the campaign, not the clock. With
    # 120 s (a deadline at 100 s) CI once stored no order_fit row in the last campaign, cause unseen: a budget spent would look
    # like a skip, so that campaign's manifest is checked first (not stopped by its budget). 300 s, not more: a hung worker
    # holds the test until the hard deadline
    BUDGET = 300
    monkeypatch.setenv('RELBOOK_RESULTS', str(tmp_path / 'gpu'))
    m0 = cp.campaign(['order_fit'], 'smoke', budget=BUDGET, out=tmp_path / 'cpu.tar.gz', workers=2)
    assert m0['caps'] == {}, m0                                           # the CPU: no cap, whatever the plan says
    monkeypatch.setattr(cp, 'get_device', lambda device=None: torch.device('cuda'))
    monkeypatch.setattr(cp, 'worker_caps', lambda order, profile, workers: {'order_relation': 1})
    m = cp.campaign(['order_relation', 'order_fit'], 'smoke', budget=BUDGET, out=tmp_path / 'a.tar.gz', workers=2)
    assert m['caps'] == {'order_relation': 1} and m['finished'] == ['order_relation', 'order_fit'], m
    for name in ('order_relation', 'order_fit'):
        keys = [json.dumps(r['params'], sort_keys=True) for r in ResultsStore(tmp_path / 'gpu' / f'{name}-smoke.jsonl').rows()]
        assert keys and len(keys) == len(set(keys)), name
    # the skip itself, observable: a cap below every worker's index (0, which the plan never gives) leaves the experiment to none
    monkeypatch.setenv('RELBOOK_RESULTS', str(tmp_path / 'skip'))
    monkeypatch.setattr(cp, 'worker_caps', lambda order, profile, workers: {'order_relation': 0})
    m3 = cp.campaign(['order_relation', 'order_fit'], 'smoke', budget=BUDGET, out=tmp_path / 'b.tar.gz', workers=2)
    assert m3['stopped'] is None, m3                                      # no budget ran out: the check below is the skip's
    assert not ResultsStore(tmp_path / 'skip' / 'order_relation-smoke.jsonl').rows()
    assert ResultsStore(tmp_path / 'skip' / 'order_fit-smoke.jsonl').rows()
