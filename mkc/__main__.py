import sys

from mkc.cli import main

sys.exit(main())
