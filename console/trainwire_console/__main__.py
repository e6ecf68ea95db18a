import sys

from trainwire_console.server import main

sys.exit(main())
