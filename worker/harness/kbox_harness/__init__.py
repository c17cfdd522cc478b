"""kbox's evaluation harness: the Python side of the kboxd <-> harness protocol.

kboxd starts worker/harness/kbox_stage.py once per stage (see
proto/kbox/v1/harness.proto). Modules here must not import torch at import
time unless they are only imported after the harness announced itself, so a
crash while importing torch is attributed to the harness, not to nobody.
"""
