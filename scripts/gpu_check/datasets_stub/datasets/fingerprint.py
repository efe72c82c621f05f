"""Stand-in for datasets.fingerprint (imported by TRL's DPO/KTO modules; unused on the GRPO path)."""

import hashlib
import pickle


class Hasher:
    @staticmethod
    def hash(value):
        return hashlib.sha256(pickle.dumps(value)).hexdigest()[:16]
