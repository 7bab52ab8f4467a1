"""Start the pre-training budget study (a few CPU-minutes of MLM vs random init).

    python studies/pretrain_budget.py --help

The study is `bertkit.studies.pretraining.budget`; this script names the checkout it sits in."""

from bertkit.studies.checkout import run_script
from bertkit.studies.pretraining import budget

if __name__ == "__main__":
    run_script(budget.main, __file__)
