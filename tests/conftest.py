"""Shared pytest set-up: the smoke profile, two threads, and a private results folder."""
import os
import pytest
import torch

os.environ.setdefault('RELBOOK_PROFILE', 'smoke')
os.environ['RELBOOK_PROGRESS'] = '0'
torch.set_num_threads(2)


@pytest.fixture(autouse=True)
def _private_results(tmp_path, monkeypatch):
    "Every test writes results into its own temporary folder."
    monkeypatch.setenv('RELBOOK_RESULTS', str(tmp_path / 'results'))
    yield
