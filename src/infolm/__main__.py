from infolm.cli.main import main

raise SystemExit(main())
