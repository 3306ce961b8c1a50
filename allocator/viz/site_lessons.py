def lessons_data():
    return {}
