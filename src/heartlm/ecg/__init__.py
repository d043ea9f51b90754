"""ECG conventions and readers shared by every stage: AAMI classes, rhythm codes, database
splits, and WFDB/EDF records read one lead at a time."""
