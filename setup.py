"""Package set-up driven by `settings.ini` (the nbdev 2.x convention)."""
from configparser import ConfigParser
import setuptools

cfg = ConfigParser(delimiters=['='])
cfg.read('settings.ini', encoding='utf-8')
cfg = cfg['DEFAULT']

setuptools.setup(
    name=cfg['lib_name'],
    version=cfg['version'],
    description=cfg['description'],
    author=cfg['author'],
    author_email=cfg['author_email'],
    license='Apache-2.0',
    url=cfg['git_url'],
    project_urls={'Source': cfg['git_url'], 'Book': cfg['doc_host'] + cfg['doc_baseurl']},
    keywords=cfg['keywords'].split(),
    classifiers=['Programming Language :: Python :: 3', 'License :: OSI Approved :: Apache Software License',
                 'Topic :: Scientific/Engineering :: Artificial Intelligence'],
    packages=setuptools.find_packages(include=['relbook', 'relbook.*']),
    include_package_data=True,
    install_requires=cfg['requirements'].split(),
    extras_require={'dev': cfg['dev_requirements'].split()},
    python_requires='>=' + cfg['min_python'],
    long_description=open('README.md', encoding='utf-8').read(),
    long_description_content_type='text/markdown',
    zip_safe=False,
    entry_points={'nbdev': [f"{cfg['lib_path']}={cfg['lib_path']}._modidx:d"],
                  'console_scripts': ['relbook=relbook.harness:main']},
)
