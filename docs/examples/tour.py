"""A tour of td (grows as the packages land)."""

import argparse

import torch

import td_core


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--quick", action="store_true", help="a small, fast run (used by CI)")
    parser.parse_args()
    print(f"td-core {td_core.__version__} on torch {torch.__version__}")
    print(
        "scale mapping biased_softplus_1.0 at 0:",
        float(td_core.mappings("biased_softplus_1.0")(torch.zeros(()))),
    )


if __name__ == "__main__":
    main()
