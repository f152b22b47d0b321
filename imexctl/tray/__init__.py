"""tray"""
