import sys

from imexctl.cli import main

sys.exit(main())
