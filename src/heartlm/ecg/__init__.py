"""ECG conventions shared by every stage: AAMI classes, rhythm codes, database splits."""
