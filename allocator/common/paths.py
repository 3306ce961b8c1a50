"""Where the project's files are: the shipped data under ``assets/`` and the project folder itself."""
from __future__ import annotations

import os

#: The project's folder: a shipped file is named relative to it (a message never shows a server's path).
PROJECT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
#: The shipped data, images and recorded GPU results.
ASSETS = os.path.join(PROJECT, "assets")
