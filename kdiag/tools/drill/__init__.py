"""kdiag drill: inject faults into the lab and check the diagnosis."""
