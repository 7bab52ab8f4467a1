"""Start the distillation table (records the runs of studies/distill.sh).

    python studies/distill_table.py --help

The study is `bertkit.studies.sidebyside.distill_table`; this script names the checkout it sits in."""

from bertkit.studies.checkout import run_script
from bertkit.studies.sidebyside import distill_table

if __name__ == "__main__":
    run_script(distill_table.main, __file__)
