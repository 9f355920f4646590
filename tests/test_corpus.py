"The language-modelling corpus: Debian documentation packages to plain text, BPE, token cache, any text folder."
import gzip, json, shutil, subprocess
from pathlib import Path
import pytest
import torch
from relbook.datasets import (DEBIAN_DOCS, build_debian_corpus, folder_fingerprint, read_text_folder, text_lm_data,
                              corpus_folder, _docs_sha256)

needs_dpkg = pytest.mark.skipif(not shutil.which('dpkg-deb'), reason='needs dpkg-deb (a Debian system)')
PROSE = ("Relational reasoning is the ability to compare objects and to act on what the comparison says. " * 6).strip()

def _deb(folder: Path, package: str, files: dict) -> None:
    "A minimal .deb holding `files` (path inside the package -> bytes), named as apt-get download names it."
    root = folder / f'{package}-root'
    (root / 'DEBIAN').mkdir(parents=True)
    (root / 'DEBIAN' / 'control').write_text(f"Package: {package}\nVersion: 1.0-1\nArchitecture: all\nMaintainer: t <t@t>\n"
                                             "Description: test\n")
    for path, data in files.items():
        (root / path).parent.mkdir(parents=True, exist_ok=True); (root / path).write_bytes(data)
    subprocess.run(['dpkg-deb', '--root-owner-group', '-b', str(root), str(folder / f'{package}_1.0-1_all.deb')],
                   check=True, capture_output=True)
    shutil.rmtree(root)

@pytest.fixture
def debs(tmp_path):
    d = tmp_path / 'debs'; d.mkdir()
    py = 'usr/share/doc/python3.11/html/_sources/'
    _deb(d, 'python3.11-doc', {py + 'library/re.rst.txt': f"The re module\n==============\n\n:func:`re.match` {PROSE}".encode(),
                               py + 'library/copy.rst.txt': f"The re module\n==============\n\n:func:`re.match` {PROSE}".encode(),  # duplicate
                               py + 'tiny.rst.txt': b'too short',
                               py + 'library/re.html': b'<p>not a source</p>'})
    lx = 'usr/share/doc/linux-doc-6.1/Documentation/'
    _deb(d, 'linux-doc-6.1', {lx + 'core-api/memory.rst.gz': gzip.compress(f".. SPDX-License-Identifier: GPL-2.0\n\nMemory\n------\n\n{PROSE} kernel".encode()),
                              lx + 'translations/it_IT/memory.rst.gz': gzip.compress(f"Memoria {PROSE}".encode()),
                              lx + 'RCU/notes.txt.gz': gzip.compress(f"RCU notes. {PROSE} rcu".encode())})
    _deb(d, 'perl-doc', {'usr/share/perl/5.36.0/pod/perlintro.pod': f"=head1 NAME\n\nperlintro - B<{PROSE}> perl\n\n=cut\n".encode()})
    return d

@needs_dpkg
def test_build_debian_corpus(debs, tmp_path):
    out = build_debian_corpus(tmp_path / 'corpus', debs=debs)
    m = json.loads((out / 'manifest.json').read_text())
    names = [n for n, _ in read_text_folder(out)]
    assert names == ['linux-doc-6.1/RCU/notes.txt', 'linux-doc-6.1/core-api/memory.rst.txt',
                     'perl-doc/perlintro.pod.txt', 'python3.11-doc/library/copy.rst.txt']   # sorted; duplicate, short, html, translation gone
    assert m['packages'] == {p: '1.0-1' for p in DEBIAN_DOCS} and m['documents'] == 4
    assert m['dropped_duplicates'] == 1 and m['dropped_short'] == 1
    assert m['sha256'] == _docs_sha256(read_text_folder(out)) == folder_fingerprint(out)
    text = dict(read_text_folder(out))
    assert text['python3.11-doc/library/copy.rst.txt'].startswith('The re module\n\nre.match Relational')   # adornment and role gone
    assert 'SPDX' not in text['linux-doc-6.1/core-api/memory.rst.txt']
    assert text['perl-doc/perlintro.pod.txt'].startswith('NAME\n\nperlintro - Relational') and '=cut' not in text['perl-doc/perlintro.pod.txt']
    assert not list(tmp_path.glob('corpus.tmp*'))                                                   # no staging left behind

@needs_dpkg
def test_build_refuses_bad_inputs(debs, tmp_path):
    with pytest.raises(ValueError, match='packages'): build_debian_corpus(tmp_path / 'c', packages=('emacs-doc',), debs=debs)
    with pytest.raises(ValueError, match='holds no python3.11-doc_'): build_debian_corpus(tmp_path / 'c', debs=tmp_path / 'empty')
    with pytest.raises(ValueError, match='min_chars'): build_debian_corpus(tmp_path / 'c', debs=debs, min_chars=0)

@needs_dpkg
def test_lm_data_from_any_text_folder(debs, tmp_path, monkeypatch):
    monkeypatch.setenv('RELBOOK_DATA', str(tmp_path / 'data'))
    out = build_debian_corpus(tmp_path / 'corpus', debs=debs)
    d = text_lm_data(8, vocab_size=300, folder=out, val_fraction=0.3)
    info = d['info']
    assert info['documents'] == 4 and info['val_documents'] >= 1 and info['train_documents'] >= 1
    assert d['train'].shape[1] == 9 and d['train'].dtype == torch.long and int(d['train'].max()) < 300
    assert (tmp_path / 'data' / 'lm').is_dir()                                  # cached under data_dir()
    tok = d['tokenizer']
    assert tok.decode(tok.encode('perl kernel rcu')) == 'perl kernel rcu'
    monkeypatch.setenv('RELBOOK_CORPUS', str(out))                              # any folder, by the environment
    assert corpus_folder() == out
    assert torch.equal(text_lm_data(8, vocab_size=300, val_fraction=0.3)['train'], d['train'])
    with pytest.raises(ValueError, match='seq_len'): text_lm_data(0, vocab_size=300, folder=out)
    with pytest.raises(ValueError, match='max_val_windows'): text_lm_data(8, vocab_size=300, folder=out, max_val_windows=0)


def test_dat_lm_names_its_missing_inputs(tmp_path, monkeypatch):
    "A campaign leaves out dat_lm where its corpus or token cache is missing (unprepared): each is named, then none once built."
    from relbook.dat_experiments import _lm_missing, lm_protocol
    from relbook.campaign import unprepared
    monkeypatch.setenv('RELBOOK_DATA', str(tmp_path / 'data'))
    folder = tmp_path / 'texts'; folder.mkdir()
    monkeypatch.setenv('RELBOOK_CORPUS', str(folder))
    assert _lm_missing('quick') == [f"the corpus {folder}"]
    for i, word in enumerate(['kernel', 'perl', 'rcu', 'python']):
        (folder / f'doc{i}.txt').write_text(f"{PROSE} {word} " * 3)
    missing = _lm_missing('quick')
    assert len(missing) == 1 and missing[0].startswith('the token cache') and 'vocabulary 4096' in missing[0]
    assert list(unprepared(['dat_lm', 'kernel_fit'], 'quick')) == ['dat_lm']
    text_lm_data(8, vocab_size=lm_protocol('quick').vocab_size, folder=folder)      # what `relbook prepare dat_lm` builds
    assert _lm_missing('quick') == [] and unprepared(['dat_lm'], 'quick') == {}
