"""The binding's documentation names every URL scheme the library takes (issue 31, item 8); no
server needed. tests/readme/run.sh runs the README's examples as printed."""

import os
import re
import sys
import unittest

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))  # bindings/python
URLS_MD = os.path.join(ROOT, "..", "..", "docs", "urls.md")
sys.path.insert(0, ROOT)
import dlock  # noqa: E402


def schemes_of_urls_md():
    """The schemes of docs/urls.md's "## Schemes" table, e.g. "redis://"."""
    with open(URLS_MD, encoding="utf-8") as f:
        text = f.read()
    table = text.split("## Schemes", 1)[1].split("\n## ", 1)[0]
    return re.findall(r"^\| `([a-z0-9+-]+://)", table, re.M)


@unittest.skipUnless(os.path.exists(URLS_MD), "no docs/urls.md (not in the source tree)")
class UrlSchemes(unittest.TestCase):
    def test_every_scheme_is_documented(self):
        schemes = schemes_of_urls_md()
        self.assertGreaterEqual(len(schemes), 8, schemes)
        with open(os.path.join(ROOT, "README.md"), encoding="utf-8") as f:
            readme = f.read()
        for scheme in schemes:
            self.assertTrue(re.search(rf"^\| `{re.escape(scheme)}", readme, re.M),
                            f"README.md's table of schemes lacks {scheme}")
            self.assertTrue(scheme in dlock.Client.__doc__, f"Client's docstring lacks {scheme}")
            self.assertTrue(scheme in dlock.__doc__, f"the module docstring lacks {scheme}")


if __name__ == "__main__":
    unittest.main()
