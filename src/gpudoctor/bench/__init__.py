"""Microbenchmarks per GPU (`gpudoctor bench`), measured in a child process of the target Python.

runner.py   starts the worker (gpudoctor/workers/bench.py: the measurements, a standalone script;
            torch imported there, never in gpudoctor) under a deadline, streams its events, draws the progress bar
analysis.py turns the worker's results into the snapshot's `bench` section: each figure beside
            the datasheet (efficiency %) and beside the median of the node's other GPUs
"""
