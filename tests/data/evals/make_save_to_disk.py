"""How gsm8k/ (a DatasetDict) and arc/ (a Dataset) were written (datasets 5.2, `pip install
datasets`): real `save_to_disk` folders for tests/test_contam_evalsets.py, which reads them
with pyarrow alone. Not run by the tests. The questions are paraphrases, not benchmark items."""

import datasets

GSM8K_TEST = [
    {"question": "Natalia sold clips to forty eight of her friends in April and then she sold "
                 "half as many clips in May how many clips did she sell",
     "answer": "Natalia sold 48/2 = 24 clips in May.\n#### 72"},
    {"question": "Weng earns twelve dollars an hour for babysitting yesterday she just did "
                 "fifty minutes of babysitting how much did she earn",
     "answer": "Weng earns 12/60 = 0.2 per minute.\n#### 10"},
]
GSM8K_TRAIN = [{"question": "A robe takes two bolts of blue fiber and half that much white "
                            "fiber how many bolts in total does it take", "answer": "#### 3"}]
ARC = [{"id": "Mercury_SC_415702",
        "question": "George wants to warm his hands quickly by rubbing them which skin surface "
                    "will produce the most heat when rubbed together",
        "choices": {"text": ["dry palms", "wet palms"], "label": ["A", "B"]}, "answerKey": "A"}]

datasets.DatasetDict({"test": datasets.Dataset.from_list(GSM8K_TEST),
                      "train": datasets.Dataset.from_list(GSM8K_TRAIN)}).save_to_disk("gsm8k")
datasets.Dataset.from_list(ARC).save_to_disk("arc")
