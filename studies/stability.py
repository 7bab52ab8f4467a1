"""Start the stability study (bertkit vs the `transformers` loop over many seeds).

    python studies/stability.py --help

The study is `bertkit.studies.sidebyside.stability`; this script names the checkout it sits in."""

from bertkit.studies.checkout import run_script
from bertkit.studies.sidebyside import stability

if __name__ == "__main__":
    run_script(stability.main, __file__)
