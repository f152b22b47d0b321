from imexctl.cli import entry

entry()
