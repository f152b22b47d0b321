# F-25: policy.mode = "feature": lifecycle._words() splits a --constraint expression on & | [ ] ,
# only, so Slurm counts ("imex*2") and parentheses ("(imex&fast)") hide the feature and
# the job silently gets no IMEX domain.
import sys
import world  # noqa: F401  (puts the checkout on sys.path, as AUDIT_CHECKOUT or this repository)
# updated: imexctl/lifecycle.py was split; the rule is imexctl.rules.policy.constraint_features
from imexctl.rules.policy import constraint_features as _words
for c, want in [("imex", True), ("imex&fast", True), ("[imex|gpu]", True), ("!imex", False),
                ("imex*2", True), ("(imex&fast)", True)]:
    got = "imex" in _words(c)
    print(f"{'ok ' if got == want else 'BAD'} constraint {c!r:22} wants IMEX: expected {want}, got {got}")
