"""Start the results study (bertkit vs the `transformers` loop, task by task).

    python studies/results.py --help

The study is `bertkit.studies.sidebyside.results`; this script names the checkout it sits in."""

from bertkit.studies.checkout import run_script
from bertkit.studies.sidebyside import results

if __name__ == "__main__":
    run_script(results.main, __file__)
