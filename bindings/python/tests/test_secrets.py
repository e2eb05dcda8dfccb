"""A URL's secrets never show: not in a client's repr, not in an error's message.

The password in these URLs, Xq7Zk9, is cut by an unencoded '/', '?' or '#' in some: no piece of
it may show. Run with the rest of the suite (tests/run.py), against the suite's redis-server.
"""

import os
import shutil
import socket
import subprocess
import sys
import tempfile
import time
import unittest

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, ".."))
import dlock  # noqa: E402

PORT = os.environ.get("REDIS_PORT")
PIECES = ("Xq7", "Zk9")


def free_port():
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    port = s.getsockname()[1]
    s.close()
    return port


class Secrets(unittest.TestCase):
    def assertNoPiece(self, text):
        for piece in PIECES:
            self.assertNotIn(piece, text)

    def test_errors_of_urls_whose_password_holds_slash_hash_or_question_mark(self):
        for url in (f"redis://app:Xq7/Zk9@127.0.0.1:{PORT}", f"redis://:Xq7#Zk9@127.0.0.1:{PORT}",
                    f"redis://u:Xq7?Zk9@127.0.0.1:{PORT}", f"redis://u:12/Xq7Zk9@127.0.0.1:{PORT}",
                    f"redis-sentinel://127.0.0.1:{PORT}/m?sentinel_password=Xq7&Zk9"):
            with self.subTest(url=url):
                with self.assertRaises(dlock.InvalidArgument) as cm:
                    dlock.Client(url)
                self.assertNoPiece(str(cm.exception))

    def test_repr_shows_urls_as_the_library_does(self):
        # What repr shows (dlock_url_redact): passwords holding URL delimiters, and
        # sentinel_password=, hidden whole.
        for url, shown in (
                (b"redis://:Xq7#Zk9@h", "redis://:***@h"),
                (b"redis://app:Xq7/Zk9@h:1/0", "redis://app:***@h:1/0"),
                (b"redis-sentinel://h/m?sentinel_password=Xq7Zk9&db=1",
                 "redis-sentinel://h/m?sentinel_password=***&db=1")):
            with self.subTest(url=url):
                self.assertEqual(dlock._url_shown(url), shown)

    @unittest.skipUnless(shutil.which("redis-server"), "needs redis-server for a sentinel")
    def test_repr_of_a_client_through_a_sentinel_with_its_own_password(self):
        # A sentinel (password Xq7Zk9) that names the suite's redis-server as its master.
        port = free_port()
        with tempfile.TemporaryDirectory() as d:
            conf = os.path.join(d, "sentinel.conf")
            with open(conf, "w") as f:
                f.write(f"port {port}\nbind 127.0.0.1\ndir {d}\nrequirepass Xq7Zk9\n"
                        f"sentinel monitor m 127.0.0.1 {PORT} 1\n")
            sentinel = subprocess.Popen(["redis-server", conf, "--sentinel"],
                                        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
            try:
                url = f"redis-sentinel://127.0.0.1:{port}/m?sentinel_password=Xq7Zk9"
                client = None
                deadline = time.monotonic() + 10
                while client is None:
                    try:
                        client = dlock.Client(url)
                    except dlock.ConnectionError:
                        if time.monotonic() > deadline:
                            raise
                        time.sleep(0.05)
                with client:
                    self.assertEqual(repr(client), f"<dlock.Client redis-sentinel://127.0.0.1:{port}"
                                                   "/m?sentinel_password=***>")
                    client.acquire("secrets-repr").release()
                self.assertNoPiece(repr(client))
            finally:
                sentinel.kill()
                sentinel.wait()


if __name__ == "__main__":
    unittest.main()
