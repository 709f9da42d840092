"""Start a child process that sleeps, write its pid to $HANG_CHILD_PID_FILE if set, then hang forever."""

import os
import subprocess
import sys
import time

child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(3600)"])
pid_file = os.environ.get("HANG_CHILD_PID_FILE")
if pid_file:
    with open(pid_file, "w") as f:
        f.write(str(child.pid))
print(f"started child {child.pid}; hanging", flush=True)
while True:
    time.sleep(60)
