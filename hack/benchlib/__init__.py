"""The pieces of `make bench` (hack/bench.py): what is measured and how (measure), the
subjects run side by side (subjects), Multus in the test bed (multus), the table (report)."""
