import sys

from hamsi.cli import main

sys.exit(main())
