"""The lab's public API: profiles, argument checks, the training loop, the store, sweeps and the CLI."""
import json
import pandas as pd
import pytest
import torch
import torch.nn as nn
from relbook import core, harness, plotting
from relbook.harness import (Classification, Regression, Seq2Seq, TrainConfig, ResultsStore, fit, grid,
                             run_sweep, split_sizes, experiment, EXPERIMENTS, main)


def test_profile_switch(monkeypatch):
    monkeypatch.setenv('RELBOOK_PROFILE', 'quick')
    assert core.get_profile() == 'quick'
    with core.using_profile('full'):
        assert core.by_profile(1, 2, 3) == 3
    assert core.get_profile() == 'quick'
    monkeypatch.setenv('RELBOOK_PROFILE', 'bogus')
    with pytest.raises(ValueError, match='profile must be one of'):
        core.get_profile()


def test_check_shape_messages():
    with pytest.raises(ValueError, match=r'x must have shape \(b, 3\)'):
        core.check_shape(torch.zeros(2, 4), 'x', ('b', 3))
    with pytest.raises(ValueError, match='n_heads must be a positive int'):
        core.check_positive(True, 'n_heads')
    assert core.check_shape(torch.zeros(2, 3), 'x', ('b', 3)) == {'b': 2}


def test_seed_everything_is_deterministic():
    core.seed_everything(3); a = torch.randn(4)
    core.seed_everything(3); assert torch.equal(a, torch.randn(4))


def test_git_sha_override(monkeypatch):
    monkeypatch.setenv('RELBOOK_GIT_SHA', 'abc123')
    assert core.provenance()['git_sha'] == 'abc123'


def test_rows_name_the_code_the_process_imported(monkeypatch):
    "A commit or an edit made while a long run goes on must not change which code its rows say ran."
    loaded = core.loaded_code()
    assert loaded['git_sha'] and loaded['source_sha'] and core._LOADED       # read at import
    monkeypatch.setattr(core, 'git_sha', lambda short=True: 'later+dirty')
    monkeypatch.setattr(core, 'source_hash', lambda root=None: 'edited')
    p = core.provenance()
    assert (p['git_sha'], p['source_sha']) == (loaded['git_sha'], loaded['source_sha']), p


def _blobs(n, seed):
    g = torch.Generator().manual_seed(seed)
    y = torch.randint(0, 2, (n,), generator=g)
    return torch.randn(n, 2, generator=g) + 2 * y[:, None] - 1, y


def test_fit_learns_and_restores_best():
    torch.manual_seed(0)
    model = nn.Linear(2, 2)
    res = fit(model, Classification(), _blobs(256, 0), _blobs(128, 1),
              TrainConfig(lr=0.05, max_epochs=30, monitor='acc', mode='max'), device='cpu', progress=False)
    acc = Classification().evaluate(model, _blobs(128, 1))['acc']
    assert acc > 0.9 and acc == pytest.approx(res.best_score)
    assert len(res.history) == 30 and res.steps == 30 * 4


def test_train_config_rejects_bad_values():
    with pytest.raises(ValueError, match='optimizer must be one of'):
        TrainConfig(optimizer='sgd')
    with pytest.raises(ValueError, match='batch_size must be a positive int'):
        TrainConfig(batch_size=0)
    with pytest.raises(ValueError, match='schedule must be one of'):
        TrainConfig(schedule='step')


def test_fit_rejects_mismatched_data():
    with pytest.raises(ValueError, match='train tensors must share'):
        fit(nn.Linear(2, 2), Classification(), (torch.zeros(4, 2), torch.zeros(3)), None, progress=False)


def test_regression_metrics_by_hand():
    model = nn.Linear(1, 1, bias=False)
    with torch.no_grad(): model.weight.fill_(1.0)
    x = torch.tensor([[1.0], [2.0]]); y = torch.tensor([[1.0], [4.0]])
    m = Regression().evaluate(model, (x, y))
    assert m['loss'] == pytest.approx(2.0) and m['max_err'] == pytest.approx(2.0)


def test_seq2seq_trains_copy_task():
    "A tiny GRU encoder-decoder learns to copy: the seq2seq path of fit and its metrics work end to end."
    class Copy(nn.Module):
        def __init__(self, V=6, d=32):
            super().__init__(); self.emb = nn.Embedding(V, d); self.enc = nn.GRU(d, d, batch_first=True)
            self.dec = nn.GRU(2 * d, d, batch_first=True); self.out = nn.Linear(d, V)
        def forward(self, src, tgt_in):
            e, h = self.enc(self.emb(src))
            ctx = e[:, :tgt_in.shape[1]]                       # position-aligned context
            return self.out(self.dec(torch.cat([self.emb(tgt_in), ctx], -1), h)[0])
    g = torch.Generator().manual_seed(0)
    src = torch.randint(2, 6, (512, 5), generator=g)
    tgt = torch.cat([torch.ones(512, 1, dtype=torch.long), src], 1)     # bos = 1
    model = Copy()
    fit(model, Seq2Seq(pad_id=0), (src[:448], tgt[:448]), (src[448:], tgt[448:]),
        TrainConfig(lr=1e-2, max_epochs=30, batch_size=64), device='cpu', progress=False)
    m = Seq2Seq(pad_id=0).evaluate(model, (src[448:], tgt[448:]))
    assert m['acc'] > 0.95 and m['seq_acc'] > 0.8, m


def test_store_and_sweep_resume(tmp_path):
    calls = []
    def trial(model, n, seed):
        calls.append(1); return {'score': n * 10 + seed}
    store = ResultsStore(tmp_path / 'x.jsonl')
    trials = grid(model=['a'], n=[1, 2], seed=[0, 1])
    df = run_sweep('x', trials, trial, store=store, progress=False)
    assert len(calls) == 4 and sorted(df.score) == [10, 11, 20, 21]
    assert {'git_sha', 'profile', 'device', 'seed', 'wall_time_s'} <= set(df.columns)
    run_sweep('x', trials + grid(model=['a'], n=[3], seed=[0]), trial, store=store, progress=False)
    assert len(calls) == 5                                  # only the new trial ran
    (tmp_path / 'x.jsonl').open('a').write('{"torn": ')     # a crash mid-write
    with pytest.warns(UserWarning, match='malformed'):
        assert len(store.rows()) == 5
    assert (tmp_path / 'x.csv').exists()


def test_sweep_shards(tmp_path, monkeypatch):
    store = ResultsStore(tmp_path / 's.jsonl')
    trials = grid(n=[1, 2, 3, 4, 5])
    monkeypatch.setenv('RELBOOK_SHARD', '1/2')
    df = run_sweep('s', trials, lambda n: {'v': n}, store=store, progress=False)
    assert sorted(df.n) == [2, 4]
    monkeypatch.setenv('RELBOOK_SHARD', '0/2')
    run_sweep('s', trials, lambda n: {'v': n}, store=store, progress=False)
    monkeypatch.delenv('RELBOOK_SHARD')
    assert len(run_sweep('s', trials, lambda n: 1 / 0, store=store, progress=False)) == 5
    monkeypatch.setenv('RELBOOK_SHARD', '2/2')
    with pytest.raises(ValueError, match='RELBOOK_SHARD'):
        run_sweep('s', trials, lambda n: {'v': n}, store=store, progress=False)


def test_sweep_stored_only_trains_nothing(tmp_path, monkeypatch):
    store = ResultsStore(tmp_path / 'o.jsonl')
    run_sweep('o', grid(n=[1, 2]), lambda n: {'v': n}, store=store, progress=False)
    monkeypatch.setenv('RELBOOK_STORED_ONLY', '1')
    with pytest.warns(UserWarning, match='2 unfinished trials skipped, 2 stored rows used'):
        df = run_sweep('o', grid(n=[1, 2, 3, 4]), lambda n: 1 / 0, store=store, progress=False)
    assert sorted(df.n) == [1, 2]                                    # the stored rows, nothing trained
    df = run_sweep('p', grid(n=[1]), lambda n: 1 / 0, store=ResultsStore(tmp_path / 'p.jsonl'), progress=False)
    assert df.empty and not (tmp_path / 'checkpoints' / 'p').exists()  # a render joins no sweep: no lock, no folder
    monkeypatch.setenv('RELBOOK_STORED_ONLY', 'maybe')
    with pytest.raises(ValueError, match='RELBOOK_STORED_ONLY'):
        run_sweep('o', grid(n=[1]), lambda n: {'v': n}, store=store, progress=False)


def test_grid_and_split_validation():
    with pytest.raises(ValueError, match="grid axis 'n' must be a non-empty list"):
        grid(n=[])
    with pytest.raises(ValueError, match='fractions must'):
        split_sizes(10, {'a': 0.8, 'b': 0.8})


def test_cli_list_and_run(capsys):
    assert main(['list']) == 0
    out = capsys.readouterr().out
    assert 'kernel_fit' in out and 'order_relation' in out
    with pytest.raises(SystemExit):
        main(['run', 'x', '--profile', 'huge'])


def test_summarize_and_plot():
    import pandas as pd
    df = pd.DataFrame({'model': ['a', 'a', 'b', 'b'], 'n': [1, 1, 1, 1], 'y': [0.0, 1.0, 2.0, 2.0]})
    s = plotting.summarize(df, ['model', 'n'], 'y')
    assert s['mean'].tolist() == [0.5, 2.0] and s['se'].tolist()[1] == 0.0
    ax = plotting.learning_curves(df, 'n', 'y')
    assert len(ax.lines) == 2


def test_experiment_registry_rules():
    "A notebook (__main__) may redefine its module's experiment; two real modules may not share a name."
    def make(module):
        def f(): return None
        f.__module__ = module
        return f
    try:
        experiment('_t_reg')(make('__main__'))
        experiment('_t_reg')(make('relbook.somewhere'))          # the module defining it after the notebook
        experiment('_t_reg')(make('__main__'))                   # and the notebook again
        with pytest.raises(ValueError, match="already registered by __main__|already registered by relbook"):
            experiment('_t_reg2')(make('relbook.a')); experiment('_t_reg2')(make('relbook.b'))
    finally:
        EXPERIMENTS.pop('_t_reg', None); EXPERIMENTS.pop('_t_reg2', None)


def test_atomic_write_leaves_only_the_file(tmp_path):
    from relbook.core import atomic_write
    p = atomic_write(tmp_path / 'sub' / 'x.json', lambda t: t.write_text('{"a": 1}'))
    assert p.read_text() == '{"a": 1}' and [f.name for f in p.parent.iterdir()] == ['x.json']


def test_patience_stop_is_the_same_run_under_a_larger_budget():
    "A run that patience stops before its budget is unchanged by a larger one (constant learning rate): the budget only bounds the loop."
    def run(max_steps):
        torch.manual_seed(0)
        net = nn.Sequential(nn.Linear(2, 16), nn.ReLU(), nn.Dropout(0.3), nn.Linear(16, 2))   # dropout: the global stream too
        cfg = TrainConfig(lr=0.05, batch_size=32, max_steps=max_steps, eval_every=5, patience=3, monitor='acc', mode='max', tie_break='loss')
        res = fit(net, Classification(), _blobs(256, 0), _blobs(128, 1), cfg, device='cpu', progress=False, checkpoint=None)
        return res, net.state_dict()
    (a, wa), (b, wb) = run(400), run(800)
    assert a.stopped_early and a.steps < 400 and a.max_steps == 400 and b.max_steps == 800
    assert (a.steps, a.best_step, a.history) == (b.steps, b.best_step, b.history)
    assert all(torch.equal(wa[k], wb[k]) for k in wa)
    c, _ = run(a.steps - 5)                          # a budget that ends the run before patience would: another run
    assert not c.stopped_early and c.steps == a.steps - 5


@pytest.mark.parametrize('profile', ['smoke', 'quick', 'gpu', 'full'])
def test_every_experiment_renders_from_no_rows(profile, monkeypatch):
    """A campaign worker whose remaining trials all run in other workers gets no rows back from its sweep, and so does a page
    rendered before any run: every registered experiment must return a table then, not fail in its own ordering of the rows
    (boxworld_rl's sort by agent failed so in five of fourteen workers on an H100 on 2026-11-27)."""
    from relbook.harness import load_all_experiments, run_experiment
    monkeypatch.setenv('RELBOOK_STORED_ONLY', '1')
    failed = {}
    for name in sorted(load_all_experiments()):
        try: out = run_experiment(name, profile)
        except Exception as e: failed[name] = f'{type(e).__name__}: {e}'
        else:
            if not isinstance(out, pd.DataFrame): failed[name] = f'returned {type(out).__name__}'
    assert not failed, failed


def test_held_runs_are_left_out_of_the_plan(monkeypatch):
    "A run in GPU_HOLD (its protocol is about to change) is not planned by a campaign without names; the others are."
    import relbook.campaign as c
    monkeypatch.setattr(c, 'GPU_HOLD', {})
    free = c.plan_terms('gpu')[0]
    assert free, "no experiment to plan: the test needs one"
    e = sorted(free)[0]
    monkeypatch.setattr(c, 'GPU_RUNS', {**c.GPU_RUNS, 'a test run': [e]})
    monkeypatch.setattr(c, 'GPU_HOLD', {'a test run': 'held: about to change'})
    held = c.plan_terms('gpu')[0]
    assert set(held) == set(free) - {e}
    assert e not in c.plan(None, 'gpu')


def test_cli_coverage(tmp_path, monkeypatch, capsys):
    """`relbook coverage`: per chapter, each sweep's trials stored of those planned at a profile; exit 1 while one is not
    whole (`make notebooks STORED=1` stops there rather than render a chapter from part of its grid, or none of it)."""
    from relbook.campaign import chapter_coverage
    monkeypatch.setenv('RELBOOK_RESULTS', str(tmp_path))             # an empty store
    ch = 'nbs/02_message_passing.ipynb'
    cov = chapter_coverage([ch], 'smoke')
    assert list(cov) == ['02_message_passing'] and {n for n, _, _ in cov['02_message_passing']} == {'recovery_phase_transition', 'robust_lasso_rate'}
    assert all(h == 0 < t for _, h, t in cov['02_message_passing'])
    assert main(['coverage', '--profile', 'smoke', ch]) == 1
    out, err = capsys.readouterr()
    assert '02_message_passing [smoke]: ' in out and 'not whole at `smoke`: ' in err and 'robust_lasso_rate (0 of ' in err
    assert main(['run', 'recovery_phase_transition', 'robust_lasso_rate', '--profile', 'smoke']) == 0
    capsys.readouterr()
    assert main(['coverage', '--profile', 'smoke', ch, '06_tp_transformer']) == 0     # whole now; a chapter without a sweep
    out, err = capsys.readouterr()
    assert '06_tp_transformer [smoke]: no sweep' in out and err == ''
    assert all(h == t for _, h, t in chapter_coverage([ch], 'smoke')['02_message_passing'])
    assert main(['coverage', '--profile', 'quick', ch]) == 1                      # another profile's stores are its own
    with pytest.raises(SystemExit, match='chapters must name notebooks of the book'):
        main(['coverage', 'nbs/99_no_such_chapter.ipynb'])
    with pytest.raises(ValueError, match='chapters must be a list'):
        chapter_coverage('02_message_passing')
    assert '05_object_sorting' in chapter_coverage(None, 'smoke')                  # no names: every chapter with a sweep
