"""Chapter 5 (object sorting): the claims ledger — budgets and convergence, sizes to reach 0.9, robustness relative to clean accuracy."""
import math
import pandas as pd
import pytest
import relbook.sorting as so
from relbook.evidence import CLAIMS, convergence


def _curves(models, seeds=range(3), sizes=(500, 1000, 2000, 3000), acc=lambda m, s, n: 0.5, best=1000, budget=3000, early=True):
    "Synthetic object_sorting rows (quick profile: a 3,000-step budget)."
    return pd.DataFrame([dict(model=m, seed=s, n_train=n, ar_seq_acc=acc(m, s, n), acc=acc(m, s, n),
                              best_step=best, max_steps=budget, stopped_early=early, profile='quick')
                         for m in models for s in seeds for n in sizes])


def _robust_rows(shares, seeds=range(3)):
    "Synthetic sorting_robustness rows: clean accuracy c, accuracy c·share(σ) under additive noise, 0 under linear maps."
    rows = []
    for m, (clean, share) in shares.items():
        for s in seeds:
            r = dict(model=m, seed=s, clean_ar_seq_acc=clean, best_step=1000, max_steps=4800, stopped_early=True, profile='quick')
            for kind, levels in so.ROBUST_LEVELS.items():
                for sigma in levels:
                    kept = 1.0 if sigma == 0 else (share(sigma) if kind == 'additive' else 0.0)
                    r[f'{kind}|{sigma}|ar_seq_acc'] = clean * kept
                    r[f'{kind}|{sigma}|ar_acc'] = 0.1 if kind == 'linear' else 0.5
            rows.append(r)
    return pd.DataFrame(rows)


def test_ledger_declares_nine_claims_under_the_chapter_headings():
    ours = {k: c for k, c in CLAIMS.items() if c.chapter == '05_object_sorting'}
    assert len(ours) == 9
    assert {c.section for c in ours.values()} == {so.SECTION_5A, so.SECTION_5B, so.SECTION_8}


def test_convergence_reads_the_step_budget_and_early_stopping():
    stopped = so.with_budget(_curves(['Abstractor'], seeds=[0], sizes=[500], best=2950, budget=3000, early=True))
    assert convergence(stopped.iloc[0], *so.CONVERGENCE) == 'converged'          # patience ran out: it had stopped improving
    late = so.with_budget(_curves(['Abstractor'], seeds=[0], sizes=[500], best=2950, budget=3000, early=False))
    assert convergence(late.iloc[0], *so.CONVERGENCE) == 'still improving'       # best in the last 10 % of the budget
    old = _curves(['Abstractor'], seeds=[0], sizes=[500]).drop(columns=['best_step', 'max_steps'])
    with pytest.raises(ValueError, match="older protocol"):
        so.with_budget(old)


def test_step_budget_has_a_floor_for_small_training_sets():
    p = so.sorting_protocol('quick')
    assert p.max_steps(250) == p.min_steps and p.max_steps(20_000) == p.max_epochs * 157   # 400 epochs of 157 batches
    f = so.sorting_protocol('full')
    assert f.batch_size == 512 and f.max_steps(100) == f.min_steps


def test_transfer_decoder_only_keeps_the_rest_fresh():
    import torch
    torch.manual_seed(0); src = so.sorting_model('Transformer')
    torch.manual_seed(1); dst = so.sorting_model('Transformer'); fresh = {k: v.clone() for k, v in dst.state_dict().items()}
    so.transfer_weights(src, dst, 'decoder')
    for k, v in dst.state_dict().items():
        assert torch.equal(v, src.state_dict()[k] if k.startswith('decoder.') else fresh[k]), k
    so.transfer_weights(src, dst, 'all')
    assert all(torch.equal(v, src.state_dict()[k]) for k, v in dst.state_dict().items())
    with pytest.raises(ValueError, match="transfer must be one of"):
        so.transfer_weights(src, dst, 'encoder')


def test_orthogonal_corruption():
    import torch
    g, o = torch.Generator().manual_seed(0), so.sorting_objects(0).objects
    q = so.random_orthogonal(12, g)
    torch.testing.assert_close(q @ q.T, torch.eye(12), atol=1e-5, rtol=0)
    torch.testing.assert_close(so.corrupt_objects(o, 'orthogonal', 1.0, g).norm(dim=1), o.norm(dim=1), atol=1e-4, rtol=0)
    with pytest.raises(ValueError, match="must be <= 1"):
        so.corrupt_objects(o, 'orthogonal', 2.0, g)
    with pytest.raises(ValueError, match="sigma must be a finite number"):
        so.corrupt_objects(o, 'linear', float('nan'), g)


def test_sample_efficiency_claim_uses_full_sequence_accuracy():
    # differences 0.40, 0.39, 0.38 over the seeds: some spread (three equal differences are decided by a sign test, which
    # three seeds cannot pass)
    rows = _curves(['Abstractor', 'Transformer'], acc=lambda m, s, n: 0.6 + 0.01 * s if m == 'Abstractor' else 0.2 + 0.02 * s)
    rows['acc'] = 0.9                                         # per element identical: must not decide the verdict
    ev = CLAIMS['sorting-abstractor-vs-transformer'].evaluate(rows)
    assert ev.comparison.effect == pytest.approx(0.39) and ev.comparison.verdict == 'supports the paper'
    assert 'per element' in ev.note


def test_sizes_to_reach_and_the_censoring_rule():
    curve = {250: 0.0, 500: 0.5, 1000: 0.95, 2000: 1.0}
    rows = _curves(['Abstractor', 'Transformer'], sizes=(250, 500, 1000, 2000), acc=lambda m, s, n: curve[n] if m == 'Abstractor' else 0.0)
    ev = CLAIMS['sorting-data-ratio'].evaluate(rows)
    n90 = 500 * 2 ** ((0.9 - 0.5) / 0.45)                     # log-interpolated between 500 and 1000
    assert ev.comparison.effect == pytest.approx(4000 / n90)  # the Transformer never reaches 0.9: twice the largest size
    assert 'censored seeds: Transformer 3, Abstractor 0' in ev.note


def test_robustness_is_judged_relative_to_clean_accuracy():
    # same share kept at every σ, different clean accuracy: not more robust
    rows = _robust_rows({'Abstractor': (0.95, lambda s: 0.5 / (1 + s)), 'Transformer': (0.80, lambda s: 0.5 / (1 + s))})
    c = CLAIMS['sorting-robust-additive'].evaluate(rows).comparison
    assert c.effect == pytest.approx(0.0, abs=1e-12)
    kept = so.retained(rows, 'additive')
    assert list(kept.columns) == [0.1, 0.25, 0.5, 1.0, 2.0] and kept.loc[('Transformer', 0), 0.1] == pytest.approx(0.5 / 1.1)
    # both at 0 per sequence and at chance per element under linear maps: said to be no evidence
    ev = CLAIMS['sorting-robust-linear'].evaluate(rows)
    assert ev.comparison.verdict == 'inconclusive' and ev.comparison.effect == 0 and 'not evidence' in ev.note
    assert so.informative_levels(rows, 'linear') == [] and so.informative_levels(rows, 'additive') == [0.1, 0.25, 0.5, 1.0, 2.0]


def test_robustness_ignores_levels_where_both_models_score_zero():
    # equal shares where anything survives, both 0 beyond σ = 0.5: the mean over informative levels is what is judged
    share = lambda s: 0.8 if s <= 0.5 else 0.0
    rows = _robust_rows({'Abstractor': (0.9, share), 'Transformer': (0.9, lambda s: 0.6 if s <= 0.5 else 0.0)})
    rows.loc[rows.model == 'Abstractor', 'additive|0.1|ar_seq_acc'] += [0.001, 0.002, 0.003]
    ev = CLAIMS['sorting-robust-additive'].evaluate(rows)
    assert so.informative_levels(rows, 'additive') == [0.1, 0.25, 0.5]
    assert ev.comparison.effect == pytest.approx(0.2 + 0.002 / 0.9 / 3, rel=1e-6)
    tab = so.robustness_by_level(rows, 'additive')
    assert set(tab.measure) == {'accuracy', 'share kept'} and len(tab) == 2 * 5


def test_claims_do_not_crash_on_smoke_rows():
    rows = _curves(list(dict.fromkeys([*so.SORTING_VARIANTS, *so.PRETRAIN_VARIANTS])), seeds=[0], sizes=(100, 300), acc=lambda m, s, n: 0.0)
    rob = _robust_rows({'Abstractor': (0.0, lambda s: 0.0), 'Transformer': (0.0, lambda s: 0.0)}, seeds=[0])
    for c in (c for c in CLAIMS.values() if c.chapter == '05_object_sorting'):
        ev = c.evaluate(rob if c.experiments == ('sorting_robustness',) else rows)
        assert ev.comparison is None or ev.comparison.verdict == 'insufficient data'


def test_a_pretrained_trial_does_not_depend_on_which_trial_trained_the_shared_model(tmp_path, monkeypatch):
    "The pre-trained model is cached and shared: the first trial that needs it trains it, the others read it. A fine-tuned model's fresh weights must not depend on which."
    from relbook.core import seed_everything, using_profile
    monkeypatch.setenv('RELBOOK_RESULTS', str(tmp_path))
    with using_profile('smoke'):
        out, cached = [], []
        for _ in range(2):                      # first: the shared model is trained inside the trial; second: read from the cache
            cached.append(len(list(tmp_path.glob('checkpoints/sorting_pretrained/*.pt'))))   # a folder of their own: campaigns carry it
            seed_everything(1)
            out.append(so.pretraining_trial('Transformer (pre-trained, decoder)', 100, 1))
        assert cached == [0, 1], cached
        for k in ('val_loss', 'acc', 'ar_seq_acc', 'best_step'):
            assert out[0][k] == out[1][k], (k, out[0][k], out[1][k])


def test_plateau_check_keeps_its_budget(monkeypatch):
    """The learning curves train under the protocol's floor (20,000 at quick); the plateau check (stop=False) stays at
    PLATEAU_STEPS at quick, and at gpu trains the sweep's whole budget (20,000) in the cells where the gpu sweep's seeds stalled."""
    from relbook.core import using_profile
    class Recorded(Exception): pass
    seen = []
    def fake_fit(net, task, train, val, cfg, **kw):          # record the configuration, train nothing
        seen.append(cfg); raise Recorded
    monkeypatch.setattr(so, 'fit', fake_fit)
    with using_profile('quick'):
        for stop in (True, False):
            with pytest.raises(Recorded): so.train_sorting('Abstractor', 500, 0, stop=stop)
        assert so.sorting_protocol().max_steps(500) == 20_000
    with using_profile('gpu'):
        with pytest.raises(Recorded): so.train_sorting('Ablation', 1000, 0, stop=False)
    assert (seen[0].max_steps, seen[0].patience, seen[0].monitor) == (20_000, 20, 'acc')
    assert (seen[1].max_steps, seen[1].patience, seen[1].monitor) == (so.PLATEAU_STEPS, None, 'loss') and so.PLATEAU_STEPS == 10_000
    assert (seen[2].max_steps, seen[2].patience, seen[2].monitor) == (20_000, None, 'loss')
    cells, seeds, cap = so.plateau_protocol('gpu')
    assert cells == {'Abstractor': [250], 'Ablation': [250, 1000, 500], 'Transformer': [250, 500], 'Abstractor (a)': [250, 500]}
    assert list(cells)[-1] == 'Abstractor (a)' and seeds == 5 and cap is None     # Figure 5b's model last, the whole budget
    cells, seeds, cap = so.plateau_protocol('quick')
    assert cells['Ablation'] == [250, 1000, 500] and all(cells[m] == [250, 500] for m in ('Abstractor', 'Transformer', 'Abstractor (a)'))
    assert list(cells)[-1] == 'Abstractor (a)' and set(cells) <= set(so.PLATEAU_MODELS)                # Figure 5b's model last
    assert all(sizes[0] == 250 for sizes in cells.values()) and list(cells)[0] == 'Abstractor'   # the smallest size first
    assert (seeds, cap) == (3, so.PLATEAU_STEPS)


def _no_patience_row(model, n, seed, accs, every=50, profile='quick'):
    "A sorting_no_patience row whose validation accuracy follows `accs`, one validation every `every` updates."
    curve = [[every * (i + 1), 1.0 - a, a] for i, a in enumerate(accs)]
    params = dict(model=model, n_train=n, seed=seed)
    return {'params': params, **params, 'val_curve': curve, 'max_steps': every * len(accs), 'profile': profile}


def _conv(ev) -> pd.Series:
    "Each row of a claim's evidence: 'converged' or 'still improving', as the ledger counts it."
    return pd.Series([convergence(r, *so.CONVERGENCE, patience_converges=ev.patience_converges) for r in ev.rows.to_dict('records')],
                     index=ev.rows.index)


def _flat_check(model, n, profile, seeds):
    "Plateau-check rows that the accuracy rule stops giving up nothing (the cell is cleared where they are the profile's own)."
    from relbook.harness import store_for
    p = so.sorting_protocol(profile).patience
    for seed in seeds:
        store_for('sorting_no_patience', profile).append_row(_no_patience_row(model, n, seed, [0.5, 0.6] + [0.55] * (p + 5), profile=profile))


def test_a_plateau_the_check_sees_runs_left_makes_the_cells_stops_count_as_still_improving():
    from relbook.harness import store_for
    rows = _curves(['Abstractor', 'Ablation'], sizes=(500, 1000),
                   acc=lambda m, s, n: 0.9 if m == 'Abstractor' else 0.1 + 0.1 * s, best=500, budget=20_000, early=True)
    rows['monitor'] = 'acc'
    cell = lambda m, n: (rows.model == m) & (rows.n_train == n)
    # no check at quick yet: the cells it is to run (the Abstractor and the Ablation model at 500, the Ablation model at
    # 1,000) are unchecked, and their stops count as still improving; the Abstractor at 1,000, a cell it does not plan, converged
    ev = CLAIMS['sorting-abstractor-vs-ablation'].evaluate(rows)
    assert (_conv(ev) == 'still improving').equals(~cell('Abstractor', 1000)) and 'no plateau check at `quick`' in ev.note
    p = so.sorting_protocol('quick').patience
    store = store_for('sorting_no_patience', 'quick')
    plateau = [0.6] * 3 + [0.8] + [0.79] * (p + 5) + [0.95, 1.0]     # the rule stops on the plateau; training on leaves it
    for seed in range(3): store.append_row(_no_patience_row('Ablation', 1000, seed, plateau))
    _flat_check('Ablation', 500, 'quick', range(3)); _flat_check('Abstractor', 500, 'quick', range(3))
    check = so.plateau_check('quick').set_index(['model', 'n_train'])
    assert (check.loc[[('Ablation', 1000)], 'stop'] == 50 * (4 + p)).all() and check.loc[[('Ablation', 1000)], 'lost'].to_numpy() == pytest.approx(0.2)
    assert (check.loc[[('Ablation', 500)], 'lost'] == 0).all()
    ev = CLAIMS['sorting-abstractor-vs-ablation'].evaluate(rows)
    hit = cell('Ablation', 1000)
    assert (_conv(ev)[hit] == 'still improving').all() and (_conv(ev)[~hit] == 'converged').all()
    assert 'Ablation at 1,000' in ev.note and 'the 3 patience stops' in ev.note
    # rows of a profile with no check of its own (gpu): the quick check's wanting cell stands in, and so does every cell the
    # gpu check is to run, the Ablation model at 500 included, which the quick check cleared; the Abstractor's, which gpu does
    # not plan to check, count as converged
    assert so.plateau_check('gpu') is None
    gpu = rows.assign(profile='gpu')
    ev = CLAIMS['sorting-abstractor-vs-ablation'].evaluate(gpu)
    ablation = gpu.model == 'Ablation'
    assert (_conv(ev)[ablation] == 'still improving').all() and (_conv(ev)[~ablation] == 'converged').all()
    assert 'no plateau check at `gpu` yet' in ev.note and 'the 6 patience stops' in ev.note and 'Ablation at 500' in ev.note
    # rows outside those cells: converged, and the note says none lies in them
    tf = _curves(['Abstractor', 'Transformer'], sizes=(1000, 3000), best=500, budget=20_000, early=True).assign(profile='gpu', monitor='acc')
    ev = CLAIMS['sorting-abstractor-vs-transformer'].evaluate(tf)
    assert (_conv(ev) == 'converged').all() and 'no patience stop of these rows lies in the cells' in ev.note
    # a gpu check that has run the cell with one seed of its five decides nothing there yet
    _flat_check('Ablation', 1000, 'gpu', [0])
    assert so.plateau_cells('gpu') == [] and so.plateau_cells('quick') == [('Ablation', 1000)]
    ev = CLAIMS['sorting-abstractor-vs-ablation'].evaluate(gpu)
    assert (_conv(ev)[ablation] == 'still improving').all() and 'has not yet run every seed of' in ev.note, ev.note
    # once the gpu check has run every seed of both cells, it alone decides gpu's rows there: nothing given up clears them
    _flat_check('Ablation', 1000, 'gpu', range(1, 5)); _flat_check('Ablation', 500, 'gpu', range(5))
    ev = CLAIMS['sorting-abstractor-vs-ablation'].evaluate(gpu)
    assert (_conv(ev) == 'converged').all() and 'no plateau check' not in ev.note and 'has not yet run' not in ev.note


def test_a_quick_check_clears_no_gpu_cell_and_its_finding_wanting_stands_in():
    """The quick check trains 10,000 updates; the gpu runs 20,000 (the Transformers at 500 left their plateau at up to 12,675).
    So its clearance of a cell says nothing of gpu's stops there, while a cell it found wanting stays suspect at gpu."""
    from relbook.harness import store_for
    rows = _curves(['Abstractor', 'Transformer'], sizes=(500, 1000), best=500, budget=20_000, early=True).assign(monitor='acc')
    p = so.sorting_protocol('quick').patience
    _flat_check('Transformer', 500, 'quick', range(3))                                   # quick clears the Transformer at 500
    left = [0.6] * 3 + [0.8] + [0.79] * (p + 5) + [0.95, 1.0]
    for seed in range(3): store_for('sorting_no_patience', 'quick').append_row(_no_patience_row('Abstractor', 500, seed, left))
    assert so.plateau_cells('quick') == [('Abstractor', 500)]
    planned = so.plateau_protocol('gpu')[0]                                          # the cells the gpu check is to run
    assert 500 not in planned['Abstractor'] and 500 in planned['Transformer']
    at500 = rows.n_train == 500
    ev = CLAIMS['sorting-abstractor-vs-transformer'].evaluate(rows)              # quick: its own check decides
    assert (_conv(ev)[at500 & (rows.model == 'Abstractor')] == 'still improving').all()
    assert (_conv(ev)[~(at500 & (rows.model == 'Abstractor'))] == 'converged').all()
    gpu = rows.assign(profile='gpu')
    ev = CLAIMS['sorting-abstractor-vs-transformer'].evaluate(gpu)                # gpu, no check of its own: both cells at 500
    assert (_conv(ev)[at500] == 'still improving').all() and (_conv(ev)[~at500] == 'converged').all()
    _flat_check('Transformer', 500, 'gpu', range(5))                               # gpu's own check clears the Transformer
    ev = CLAIMS['sorting-abstractor-vs-transformer'].evaluate(gpu)
    assert (_conv(ev)[at500 & (gpu.model == 'Abstractor')] == 'still improving').all()   # the quick finding still stands in
    assert (_conv(ev)[~(at500 & (gpu.model == 'Abstractor'))] == 'converged').all()
    _flat_check('Abstractor', 500, 'gpu', range(5))                                # and gpu's own check of that cell decides it
    assert all(_conv(CLAIMS['sorting-abstractor-vs-transformer'].evaluate(gpu)) == 'converged')


def test_retained_keeps_a_missing_accuracy_missing_and_refuses_an_unknown_kind():
    rows = _robust_rows({'Abstractor': (0.9, lambda s: 0.5), 'Transformer': (0.0, lambda s: 0.5)})
    rows.loc[0, 'additive|0.1|ar_seq_acc'] = math.nan                  # a missing corrupted accuracy
    rows.loc[1, 'additive|0.0|ar_seq_acc'] = math.nan                  # a missing clean accuracy
    kept = so.retained(rows, 'additive')
    assert math.isnan(kept.loc[('Abstractor', 0), 0.1]) and kept.loc[('Abstractor', 0), 0.25] == pytest.approx(0.5)
    assert kept.loc[[('Abstractor', 1)]].isna().all(axis=None)        # no clean accuracy: nothing to be a share of
    assert (kept.xs('Transformer', level='model') == 0).all(axis=None)   # clean accuracy 0: kept 0, as documented
    with pytest.raises(ValueError, match="must be finite"):            # the claim refuses a missing cell, never reads it as 0
        CLAIMS['sorting-robust-additive'].evaluate(rows)
    for f in (so.retained, so.informative_levels, so.robustness_by_level):
        with pytest.raises(ValueError, match=r"kind must be one of \('additive', 'linear', 'orthogonal'\), got 'addtive'"):
            f(rows, 'addtive')
    with pytest.raises(ValueError, match="metric must be one of"):
        so.retained(rows, 'additive', 'seq_acc')


def test_splits_and_size_to_reach_refuse_bad_sizes_and_levels():
    sp = so.sorting_splits(0, 20, 5, 5)
    with pytest.raises(ValueError, match="n must be a non-negative int, got -1"):
        sp.data('pool', -1)
    assert len(sp.data('pool', 0)[0]) == 0 and len(sp.data('pool', 20)[0]) == 20
    for args, name in (((0, -5, 10, 10), 'n_pool'), ((0, 10, -1, 10), 'n_val'), ((0, 10, 10, 2.5), 'n_test'), ((-1, 10, 10, 10), 'seed')):
        with pytest.raises(ValueError, match=f"{name} must be a non-negative int"):
            so.sorting_splits(*args)
    for level in (math.nan, 1.5, -0.1, True, None):
        with pytest.raises(ValueError, match="level must be an accuracy in"):
            so.size_to_reach([100, 200], [0.5, 1.0], level)
    with pytest.raises(ValueError, match="sizes must be positive finite"):
        so.size_to_reach([0, 100], [0.5, 1.0], 0.9)
    assert so.size_to_reach([100, 200], [0.5, 1.0], 1.0) == pytest.approx(200) and so.size_to_reach([100, 200], [0.5, 1.0], 0) == 100


def test_a_cached_model_is_trained_by_one_process_at_a_time(tmp_path):
    """While one process trains a cached model (holding its lock) another cannot take the lock: it waits, then reads the
    model, so every trial of a seed shares one pre-trained model even where training is not deterministic (a GPU)."""
    from relbook.harness import model_lock, _try_lock
    path = tmp_path / 'm.pt'
    with model_lock(path):
        assert _try_lock(tmp_path / 'm.pt.lock') is None          # a second opener (another worker) would block here
    f = _try_lock(tmp_path / 'm.pt.lock'); assert f is not None; f.close()


def test_train_sorting_takes_the_lock_of_a_cached_model_only(tmp_path, monkeypatch):
    "train_sorting holds the model's lock while it trains a cached model (and only then); a pre-trained model is cached apart."
    from relbook.core import using_profile
    import relbook.harness as H
    monkeypatch.setenv('RELBOOK_RESULTS', str(tmp_path))
    held = []
    real_fit = so.fit
    def taken(lock):
        "Does another opener hold `lock`? (A lock this probe takes is released at once.)"
        if (f := H._try_lock(lock)) is None: return True
        f.close(); return False
    def fit_watching(*a, **kw):
        locks = list(tmp_path.glob('checkpoints/*/*.lock'))
        held.append(bool(locks) and all(taken(l) for l in locks))   # is the lock taken while it trains?
        return real_fit(*a, **kw)
    monkeypatch.setattr(so, 'fit', fit_watching)
    with using_profile('smoke'):
        so.train_sorting('Transformer', 100, 0, task='pretrain', cache=True)
        so.train_sorting('Transformer', 100, 0, cache=False)
    assert held == [True, False], held
    assert len(list(tmp_path.glob('checkpoints/sorting_pretrained/*.pt'))) == 1 and not list(tmp_path.glob('checkpoints/sorting_models/*.pt'))


def test_official_input_scales_change_the_embedders_only():
    "The input-scale control: the official embedders (Glorot Dense × √d, U(±0.05) × √d), every other weight and the random state as at our scales."
    import torch
    from relbook.core import seed_everything
    states, after = {}, {}
    for sc in so.INPUT_SCALES:
        seed_everything(3); net = so.sorting_model('Abstractor', sc); after[sc] = torch.rand(4)
        states[sc] = net.state_dict()
    book, off = states['book'], states['official']
    assert book.keys() == off.keys() and torch.equal(after['book'], after['official'])
    for k in book:
        assert torch.equal(book[k], off[k]) != k.startswith(('src_embed.', 'tgt_embed.')), k
    assert off['tgt_embed.emb.weight'].abs().max() <= 0.05 and torch.equal(off['src_embed.bias'], torch.zeros(64))
    assert off['src_embed.weight'].abs().max() <= math.sqrt(6 / (12 + 64)) + 1e-6          # Glorot uniform's bound
    x = torch.randn(2, so.SEQ_LEN, 12)
    assert torch.allclose(net.src_embed(x), (x @ off['src_embed.weight'].T) * 8.0, atol=1e-5)   # × √64, zero bias
    with pytest.raises(ValueError, match="scales must be one of"):
        so.sorting_model('Abstractor', 'keras')


def test_official_scales_of_the_abstractor_a_leave_its_objects_unscaled():
    "The Abstractor (a)'s official objects pass a plain Dense (no √d); its target tokens are U(±0.05) × √d as the others'."
    import torch
    net = so.sorting_model('Abstractor (a)', 'official')
    assert type(net.src_embed) is torch.nn.Linear and torch.equal(net.src_embed.bias, torch.zeros(64))
    assert net.tgt_embed.emb.weight.abs().max() <= 0.05 and net.tgt_embed.scale == 8.0
    x = torch.randn(2, so.SEQ_LEN, 12)
    assert torch.allclose(net.src_embed(x), x @ net.src_embed.weight.T, atol=1e-6)
    assert set(so.OFFICIAL_OBJECTS_SCALED) == set(so.SORTING_MODELS)
    with pytest.raises(ValueError, match="scale_objects must be a bool"):
        so.official_input_scales(so.sorting_model('Abstractor (a)'), 1)


def test_the_cache_keys_on_the_scales_and_keeps_our_keys():
    "A model at the official scales is cached apart; at ours the key is the one the stored models were saved under."
    from dataclasses import replace
    from relbook.core import using_profile
    with using_profile('smoke'):
        cfg = replace(so.SORTING_TRAIN, max_steps=10)
        book = so._cache_path('Abstractor (a)', 'pretrain', 100, 0, cfg)
        assert so._cache_path('Abstractor (a)', 'pretrain', 100, 0, cfg, 'book') == book
        assert so._cache_path('Abstractor (a)', 'pretrain', 100, 0, cfg, 'official') != book


def test_pretraining_trial_at_official_scales_caches_its_own_models(tmp_path, monkeypatch):
    "A pre-trained variant at the official scales pre-trains (and caches) a model of its own, not the one at our scales."
    from relbook.core import seed_everything, using_profile
    monkeypatch.setenv('RELBOOK_RESULTS', str(tmp_path))
    with using_profile('smoke'):
        seed_everything(0)
        r = so.pretraining_trial('Abstractor (a) (pre-trained)', 100, 0, scales='official')
        assert all(math.isfinite(r[k]) for k in ('acc', 'ar_seq_acc', 'pretrain_val_loss'))
        assert len(list(tmp_path.glob('checkpoints/sorting_pretrained/*.pt'))) == 1
        seed_everything(0)
        so.pretraining_trial('Abstractor (a) (pre-trained)', 100, 0)
        assert len(list(tmp_path.glob('checkpoints/sorting_pretrained/*.pt'))) == 2
        with pytest.raises(ValueError, match="scales must be one of"):
            so.pretraining_trial('Abstractor (a)', 100, 0, scales='keras')


def test_input_scale_trial_runs_uncached_and_refuses_our_scales(tmp_path, monkeypatch):
    from relbook.core import seed_everything, using_profile
    monkeypatch.setenv('RELBOOK_RESULTS', str(tmp_path))
    with using_profile('smoke'):
        with pytest.raises(ValueError, match="scales must be one of"):
            so.input_scale_trial('Transformer', 100, 0, 'book')        # our scales are Figure 5a's own trials
        seed_everything(0)
        r = so.input_scale_trial('Transformer', 100, 0, 'official')
        assert all(math.isfinite(r[k]) for k in ('acc', 'ar_seq_acc', 'val_loss'))
        seed_everything(0)
        q = so.input_scale_plateau_trial('Transformer', 100, 0, 'official')   # no patience: the whole capped budget, its curve
        assert q['steps'] == q['max_steps'] and len(q['val_curve']) >= 1 and q['monitor'] == 'loss'
        assert not list(tmp_path.glob('checkpoints/**/*.pt'))          # nothing cached under Figure 5a's keys


def test_adam_eps_trial_reads_the_optimizer_at_its_marks(monkeypatch):
    "The ε diagnostic: one reading per mark, shares in [0, 1], PyTorch's ε recorded, the paper's ε compared; SGD refused."
    import torch
    from relbook.harness import adam_eps_effect
    from relbook.sorting import adam_eps_trial, adam_eps_marks, ADAM_EPS_PAPER
    monkeypatch.setenv('RELBOOK_PROFILE', 'smoke')
    torch.manual_seed(0)
    r = adam_eps_trial('Transformer', 100, 0)
    assert r['marks'] == adam_eps_marks() and r['eps'] == 1e-8 and ADAM_EPS_PAPER == 1e-7
    for k in ('share_moved', 'norm_share_moved'):
        assert len(r[k]) == len(r['marks']) and all(0 <= v <= 1 for v in r[k])
    assert all(0 < v < 0.9 + 1e-6 for v in r['max_rel_change'])           # |1e-8 - 1e-7| / (s + 1e-7) < 0.9
    assert all(isinstance(p, list) for p in r['top_params']) and len(r['val_acc']) == len(r['marks'])
    with pytest.raises(ValueError, match='opt must be a torch.optim.Adam'):
        adam_eps_effect(torch.optim.SGD(torch.nn.Linear(2, 2).parameters(), lr=0.1), 1e-7)


def test_more_bad_inputs_are_refused_by_name():
    "Review leftovers: negative counts and seeds, a bool or NaN sigma, d = 0, a NaN accuracy on a learning curve."
    import numpy as np, torch
    from relbook.sorting import corrupt_objects, random_orthogonal, sorting_objects, sample_sequences, size_to_reach, sorting_protocol
    g, o = torch.Generator().manual_seed(0), torch.randn(48, 12)
    assert corrupt_objects(o, 'additive', np.float32(0.1), g).shape == (48, 12)      # a numpy float is a number
    for f, args, msg in ((corrupt_objects, (o, 'additive', True, g), 'sigma must be'), (corrupt_objects, (o, 'linear', float('nan'), g), 'sigma must be'),
                         (random_orthogonal, (0, g), 'd must be'), (sorting_objects, (-1,), 'seed must be'),
                         (sample_sequences, (-3, g), 'n must be'), (size_to_reach, ([1, 2], [0.5, float('nan')], 0.9), 'values must be finite'),
                         (sorting_protocol('quick').max_steps, (0,), 'n_train must be')):
        with pytest.raises(ValueError, match=msg): f(*args)


def test_a_pretraining_run_still_improving_makes_its_fine_tuned_rows_still_improving():
    # from-scratch and pre-trained Abstractor (a) rows, all converged on their own; seed 0's pre-training run had its best model
    # in the last 10 % of its budget: its pre-trained rows count as still improving, and the claim's verdict is provisional
    rows = _curves(['Abstractor (a) (pre-trained)', 'Abstractor (a)'], sizes=(250, 500, 1000), early=False,
                   acc=lambda m, s, n: 0.9 + 0.01 * s if 'pre-trained' in m else 0.3 + 0.02 * s)
    rows['monitor'] = so.SORTING_TRAIN.monitor
    pre = rows['model'].str.contains('pre-trained')
    rows.loc[pre, ['pretrain_steps', 'pretrain_fit_time_s', 'pretrain_max_steps']] = [3000, 10.0, 3000]
    rows.loc[pre, 'pretrain_best_step'] = [2990 if s == 0 else 1000 for s in rows.loc[pre, 'seed']]
    rows.loc[pre, 'pretrain_stopped_early'] = False
    rows.loc[pre, 'pretrain_monitor'] = so.SORTING_TRAIN.monitor
    assert so.pretrain_still_rows(rows).tolist() == (pre & rows['seed'].eq(0)).tolist()
    ev = CLAIMS['sorting-pretraining-helps-abstractor'].evaluate(rows)
    conv = [convergence(r, *ev.convergence_keys, patience_converges=ev.patience_converges) for r in ev.rows.to_dict('records')]
    assert conv.count('still improving') == 3                          # seed 0's three pre-trained rows, nothing else
    assert '3 of 9 rows started from a pre-training run still improving' in ev.note
    rows['pretrain_best_step'] = rows['pretrain_best_step'].where(~pre, 1000)   # every pre-training run converged: none
    ev = CLAIMS['sorting-pretraining-helps-abstractor'].evaluate(rows)
    assert all(convergence(r, *ev.convergence_keys, patience_converges=ev.patience_converges) == 'converged'
               for r in ev.rows.to_dict('records'))


def test_a_plateau_cell_reaches_rows_at_our_input_scales_only():
    # the plateau check trains at our scales: a cell it found wanting says nothing of a run at the official ones
    df = pd.DataFrame([dict(model='Abstractor (a)', n_train=250, scales=s) for s in ('official', 'book', None)]
                      + [dict(model='Abstractor (a)', n_train=500, scales='book')])
    assert so._cell_in(df, [('Abstractor (a)', 250)]).tolist() == [False, True, True, False]
    assert so._cell_in(df.drop(columns='scales'), [('Abstractor (a)', 250)]).tolist() == [True, True, True, False]
